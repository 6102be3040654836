//! Graph capture, validation, replay and timing.

use std::sync::Arc;

use chorus_core::Result;
use cudarc::driver::{sys, CudaGraph, CudaStream};

use crate::error::{check, cuda_error, OrCuda};

/// Ends the capture started on `stream`, instantiates the graph, and checks that it holds only
/// kernel, memcpy and memset nodes (anything else would mean host work or allocation in a step).
pub(crate) fn finish_capture(stream: &Arc<CudaStream>) -> Result<(CudaGraph, usize)> {
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .or_cuda("cuStreamEndCapture")?
        .ok_or_else(|| cuda_error("cuStreamEndCapture", "the capture produced no graph"))?;
    let nodes = check_nodes(graph.cu_graph())?;
    Ok((graph, nodes))
}

/// Counts the nodes of `graph`, failing on any node that is not a kernel, memcpy or memset.
fn check_nodes(graph: sys::CUgraph) -> Result<usize> {
    const OP: &str = "cuGraphGetNodes";
    let mut count = 0usize;
    // SAFETY: a null node array asks for the count only.
    check(
        unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count) },
        OP,
    )?;
    let mut nodes: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); count];
    // SAFETY: `nodes` holds `count` entries.
    check(
        unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count) },
        OP,
    )?;
    for node in nodes.iter().take(count) {
        let mut ty = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: `node` belongs to `graph`; valid out-pointer.
        check(
            unsafe { sys::cuGraphNodeGetType(*node, &mut ty) },
            "cuGraphNodeGetType",
        )?;
        match ty {
            sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL
            | sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY
            | sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET => {}
            other => {
                return Err(cuda_error(
                    "graph capture",
                    format!("the step graph holds a {other:?} node; only kernels, copies and memsets are allowed"),
                ))
            }
        }
    }
    Ok(count)
}

/// Replays `graph` `iters` times back to back and returns each replay's device time in ms,
/// measured between events recorded on the stream around it.
pub(crate) fn time_replays(
    graph: &CudaGraph,
    stream: &Arc<CudaStream>,
    iters: usize,
) -> Result<Vec<f32>> {
    let ctx = stream.context();
    let events = (0..=iters)
        .map(|_| ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .or_cuda("cuEventCreate")?;
    events[0].record(stream).or_cuda("cuEventRecord")?;
    for e in &events[1..] {
        graph.launch().or_cuda("cuGraphLaunch")?;
        e.record(stream).or_cuda("cuEventRecord")?;
    }
    stream.synchronize().or_cuda("cuStreamSynchronize")?;
    events
        .windows(2)
        .map(|w| w[0].elapsed_ms(&w[1]).or_cuda("cuEventElapsedTime"))
        .collect()
}
