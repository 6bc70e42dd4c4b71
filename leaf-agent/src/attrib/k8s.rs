//! Kubernetes pods from cgroup paths: pod UID and QoS class, for both
//! kubelet cgroup drivers.
//!
//! - cgroupfs: `/kubepods/burstable/pod<uid>/<container>`,
//!   `/kubepods/pod<uid>/…` (Guaranteed has no QoS level);
//! - systemd: `/kubepods.slice/kubepods-besteffort.slice/
//!   kubepods-besteffort-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope`.

/// A pod's QoS class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qos {
    /// Requests equal limits for every container.
    Guaranteed,
    /// Some requests set.
    Burstable,
    /// No requests or limits.
    BestEffort,
}

impl Qos {
    /// The label value Kubernetes uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Qos::Guaranteed => "Guaranteed",
            Qos::Burstable => "Burstable",
            Qos::BestEffort => "BestEffort",
        }
    }
}

/// A pod found in a cgroup path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// Pod UID with dashes (`0f1e…-…`).
    pub uid: String,
    /// QoS class.
    pub qos: Qos,
}

fn is_uid(s: &str) -> bool {
    s.len() == 36
        && s.chars().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// The pod of a cgroup path (a `/proc/<pid>/cgroup` path or a directory
/// below the cgroup root), or `None` outside Kubernetes.
pub fn parse_pod_cgroup(path: &str) -> Option<PodRef> {
    let mut parts = path.split('/').filter(|p| !p.is_empty());
    let mut qos = Qos::Guaranteed;
    parts.find(|p| *p == "kubepods" || *p == "kubepods.slice")?;
    for part in parts {
        let name = part.strip_suffix(".slice").unwrap_or(part);
        match name {
            "burstable" | "kubepods-burstable" => qos = Qos::Burstable,
            "besteffort" | "kubepods-besteffort" => qos = Qos::BestEffort,
            _ => {
                let pod = name
                    .rsplit_once("-pod")
                    .map(|(_, p)| p)
                    .or_else(|| name.strip_prefix("pod"))?;
                let uid = pod.replace('_', "-");
                return is_uid(&uid).then_some(PodRef { uid, qos });
            }
        }
    }
    None
}

/// A pod's namespace and name from its kubelet log directory name,
/// `<namespace>_<pod name>_<pod uid>` (`/var/log/pods/`, kubelet
/// `BuildPodLogsDirectory`). Namespaces and pod names are DNS-1123 names,
/// which have no `_`, so the split is unambiguous.
pub fn parse_pod_log_dir(name: &str) -> Option<(String, String, String)> {
    let mut parts = name.splitn(3, '_');
    let (ns, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    (ok(ns) && ok(pod) && is_uid(uid)).then(|| (ns.to_string(), pod.to_string(), uid.to_string()))
}
