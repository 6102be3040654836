//! Where `chorus serve` runs each model stage and the encoder: on the one device its own flag
//! names (`--music-device`, `--tts-device`, `--stt-device`; the encoder on `--device`), or, with
//! `--devices`, one copy on every listed device, each new job placed on the least loaded one.

use anyhow::{bail, Result};
use chorus_runtime::device::{resolve, DeviceKind, DEFAULT_CUDA_DEVICE};

/// One device a stage runs a copy on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageDevice {
    /// The `device` label of its metrics and errors (the CUDA ordinal, or a stand-in's number).
    pub label: usize,
    pub kind: DeviceKind,
    /// The CUDA ordinal it opens (on CUDA only).
    pub cuda: usize,
}

/// The devices of one stage: `--devices` when given (CUDA, or one CPU copy per stand-in device
/// of `--model fake`), else the one device `flag` names (the CPU by default). Naming both is an
/// error: `--devices` places every stage, so a stage flag beside it would be ignored.
pub fn stage_devices(
    ordinals: Option<&[usize]>,
    fake: bool,
    flag: Option<DeviceKind>,
    flag_name: &str,
) -> Result<Vec<StageDevice>> {
    match (ordinals, flag) {
        (Some(_), Some(_)) => bail!(
            "{flag_name} and --devices: with --devices every stage runs one copy on each listed \
             device; drop {flag_name} (or --devices, to run this stage on one device)"
        ),
        (Some(list), None) => {
            let kind = if fake {
                DeviceKind::Cpu
            } else {
                DeviceKind::Cuda
            };
            Ok(list
                .iter()
                .map(|&o| StageDevice {
                    label: o,
                    kind,
                    cuda: o,
                })
                .collect())
        }
        (None, flag) => Ok(vec![StageDevice {
            label: chorus_server::stage::pool::DEFAULT_DEVICE,
            kind: resolve(flag.unwrap_or(DeviceKind::Cpu)),
            cuda: DEFAULT_CUDA_DEVICE,
        }]),
    }
}

/// Whether every device of a stage is a CUDA device (they are all of one kind).
pub fn on_cuda(devices: &[StageDevice]) -> bool {
    devices.first().is_some_and(|d| d.kind == DeviceKind::Cuda)
}

/// The devices in words, for the start-up lines.
pub fn describe(devices: &[StageDevice]) -> String {
    match devices {
        [one] => format!("{:?}", one.kind).to_lowercase(),
        many => format!(
            "{} devices ({})",
            many.len(),
            many.iter()
                .map(|d| d.label.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_place_every_stage_and_a_stage_flag_beside_them_is_refused() {
        let list = [0, 3];
        let cuda = stage_devices(Some(&list), false, None, "--music-device").unwrap();
        assert_eq!(cuda.iter().map(|d| d.label).collect::<Vec<_>>(), [0, 3]);
        assert!(on_cuda(&cuda));
        let fake = stage_devices(Some(&list), true, None, "--music-device").unwrap();
        assert!(fake.iter().all(|d| d.kind == DeviceKind::Cpu));
        let e = stage_devices(Some(&list), false, Some(DeviceKind::Cpu), "--tts-device")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--tts-device and --devices"), "{e}");
        let one = stage_devices(None, false, None, "--stt-device").unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].kind, DeviceKind::Cpu);
    }
}
