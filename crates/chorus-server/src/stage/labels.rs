//! One Prometheus text from the metrics of several devices: each family's `# HELP` and `# TYPE`
//! once, then every device's samples of it with a `device` label, so that each stage renders its
//! own metrics unchanged and the pool only labels them.

use std::collections::HashMap;

/// A metric family as rendered: its header lines and samples.
struct Family {
    header: Vec<String>,
    samples: Vec<String>,
}

/// Merges `sources` (each the text of one device, or `None` for samples of the whole server, left
/// unlabelled) family by family, in the order families first appear.
pub(crate) fn merge_by_device(sources: &[(Option<usize>, &str)]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut families: HashMap<String, Family> = HashMap::new();
    for &(device, text) in sources {
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line
                .strip_prefix("# HELP ")
                .or_else(|| line.strip_prefix("# TYPE "))
            {
                current = rest.split(' ').next().unwrap_or_default().to_string();
                let family = families.entry(current.clone()).or_insert_with(|| {
                    order.push(current.clone());
                    Family {
                        header: Vec::new(),
                        samples: Vec::new(),
                    }
                });
                if !family.header.iter().any(|h| h == line) {
                    family.header.push(line.to_string());
                }
                continue;
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let family = families.entry(current.clone()).or_insert_with(|| {
                order.push(current.clone());
                Family {
                    header: Vec::new(),
                    samples: Vec::new(),
                }
            });
            family.samples.push(match device {
                Some(d) => with_device(line, d),
                None => line.to_string(),
            });
        }
    }
    let mut out = String::new();
    for name in order {
        let f = &families[&name];
        for line in f.header.iter().chain(&f.samples) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `name{a="b"} v` becomes `name{device="d",a="b"} v`; `name v` becomes `name{device="d"} v`.
fn with_device(sample: &str, device: usize) -> String {
    let name_end = sample.find([' ', '{']).unwrap_or(sample.len());
    let (name, rest) = sample.split_at(name_end);
    match rest.strip_prefix('{') {
        Some(labels) => format!("{name}{{device=\"{device}\",{labels}"),
        None => format!("{name}{{device=\"{device}\"}}{rest}"),
    }
}

#[cfg(test)]
mod tests {
    use super::merge_by_device;

    #[test]
    fn families_are_merged_with_each_devices_label() {
        let a = "# HELP x_total Xs.\n# TYPE x_total counter\nx_total 1\n\
                 # HELP h Hist.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_count 2\n";
        let b = "# HELP x_total Xs.\n# TYPE x_total counter\nx_total 5\n\
                 # HELP h Hist.\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_count 0\n";
        let front = "# HELP x_total Xs.\n# TYPE x_total counter\nx_total{code=\"busy\"} 3\n";
        let got = merge_by_device(&[(Some(0), a), (Some(4), b), (None, front)]);
        let want = "# HELP x_total Xs.\n# TYPE x_total counter\nx_total{device=\"0\"} 1\n\
                    x_total{device=\"4\"} 5\nx_total{code=\"busy\"} 3\n\
                    # HELP h Hist.\n# TYPE h histogram\nh_bucket{device=\"0\",le=\"1\"} 2\n\
                    h_count{device=\"0\"} 2\nh_bucket{device=\"4\",le=\"1\"} 0\nh_count{device=\"4\"} 0\n";
        assert_eq!(got, want);
    }
}
