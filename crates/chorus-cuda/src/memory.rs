//! Device and pinned host allocations, and the registry of buffers whose contents warm-up runs
//! must leave untouched (everything but weights: state, activations, integer buffers).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chorus_core::Result;
use cudarc::driver::{sys, CudaContext};

use crate::error::{check, cuda_error};

/// Device pointer and size of every registered allocation, by pointer.
pub(crate) type Registry = Arc<Mutex<HashMap<sys::CUdeviceptr, usize>>>;

/// Each sequenced weight's successor, by the weight's device address (`lm/next.rs`): an
/// allocation leaves it when it is freed, as a key and as a successor, so that a later allocation
/// at the same address never inherits a stale successor.
pub(crate) type Successors = Arc<Mutex<HashMap<sys::CUdeviceptr, crate::lm::NextWeight>>>;

/// One device allocation, freed on drop.
pub(crate) struct DevMem {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
    registry: Option<Registry>,
    successors: Option<Successors>,
}

impl DevMem {
    /// Allocates `bytes` (at least one) of uninitialised device memory; `registry`, when given,
    /// records the allocation until it is dropped.
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        bytes: usize,
        registry: Option<&Registry>,
    ) -> Result<Self> {
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the context is bound by the caller.
        check(
            unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(1)) },
            "cuMemAlloc",
        )
        .map_err(|e| cuda_error("cuMemAlloc", format!("{bytes} bytes: {e}")))?;
        if let Some(reg) = registry {
            lock(reg).insert(ptr, bytes);
        }
        Ok(Self {
            ptr,
            bytes,
            ctx: ctx.clone(),
            registry: registry.cloned(),
            successors: None,
        })
    }

    /// The allocation leaves `s` when it is freed.
    pub(crate) fn leaving(mut self, s: &Successors) -> Self {
        self.successors = Some(s.clone());
        self
    }

    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        if let Some(reg) = &self.registry {
            lock(reg).remove(&self.ptr);
        }
        if let Some(s) = &self.successors {
            let mut map = lock(s);
            map.remove(&self.ptr);
            map.retain(|_, next| next.ptr != self.ptr);
        }
        // Errors cannot be reported from drop; a failed free only leaks.
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `ptr` came from cuMemAlloc and is freed once.
        let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Locks the registry; a poisoned lock still holds consistent data (inserts and removes only).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Page-locked host memory, so that copies can be captured in a graph and run asynchronously.
pub(crate) struct Pinned {
    ptr: *mut u8,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

impl Pinned {
    /// Allocates `bytes` of zeroed pinned memory.
    pub(crate) fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
        let mut ptr: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; the context is bound by the caller.
        check(
            unsafe { sys::cuMemAllocHost_v2(&mut ptr, bytes.max(1)) },
            "cuMemAllocHost",
        )?;
        // SAFETY: the allocation holds at least `bytes` bytes.
        unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, bytes) };
        Ok(Self {
            ptr: ptr as *mut u8,
            bytes,
            ctx: ctx.clone(),
        })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The memory as a slice of `T` (`T` is i32 or f32: any bit pattern is valid).
    pub(crate) fn as_slice<T: Copy>(&self) -> &[T] {
        // SAFETY: the allocation is page-aligned, holds `bytes` initialised bytes, and lives as long as `self`.
        unsafe {
            std::slice::from_raw_parts(self.ptr as *const T, self.bytes / std::mem::size_of::<T>())
        }
    }

    /// Mutable view, as [`Pinned::as_slice`].
    pub(crate) fn as_mut_slice<T: Copy>(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the view unique.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.ptr as *mut T,
                self.bytes / std::mem::size_of::<T>(),
            )
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `ptr` came from cuMemAllocHost and is freed once.
        let _ = unsafe { sys::cuMemFreeHost(self.ptr as *mut std::ffi::c_void) };
    }
}

// SAFETY: `Pinned` owns its allocation exclusively; moving it between threads moves that ownership.
unsafe impl Send for Pinned {}
