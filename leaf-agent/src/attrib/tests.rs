//! The I/O carry state machine: exits, reaping, PID reuse.

use super::JobIo;
use crate::collect::proc_io::{IoCounters, ProcIdentity, ProcSample};

fn io(w: u64) -> IoCounters {
    IoCounters {
        read_bytes: w / 2,
        write_bytes: w,
        read_ops: w / 100,
        write_ops: w / 10,
    }
}

fn p(pid: u32, ppid: u32, start: u64, w: u64) -> ProcSample {
    ProcSample {
        pid,
        id: ProcIdentity {
            ppid,
            start_ticks: start,
        },
        io: io(w),
    }
}

#[test]
fn new_processes_count_in_full_and_growth_adds() {
    let mut j = JobIo::new();
    assert_eq!(j.update(&[p(10, 1, 5, 100)]).write_bytes, 100);
    assert_eq!(
        j.update(&[p(10, 1, 5, 250), p(11, 10, 6, 40)]).write_bytes,
        290
    );
    assert_eq!(j.processes(), 2);
}

#[test]
fn exit_reaped_by_parent_in_job_is_not_counted_twice() {
    // shell 10 runs dd 11; dd writes 300, exits, shell reaps it (+300).
    let mut j = JobIo::new();
    j.update(&[p(10, 1, 5, 0), p(11, 10, 6, 100)]);
    assert_eq!(j.total().write_bytes, 100);
    // dd wrote 200 more, then was reaped: its 300 now shows in the shell.
    let t = j.update(&[p(10, 1, 5, 300)]);
    assert_eq!(t.write_bytes, 300);
    // Later the shell writes 5 of its own.
    assert_eq!(j.update(&[p(10, 1, 5, 305)]).write_bytes, 305);
}

#[test]
fn exited_but_not_yet_reaped_child_waits_for_the_reaping() {
    // The child leaves cgroup.procs at exit; the parent reaps it a tick later.
    let mut j = JobIo::new();
    j.update(&[p(10, 1, 5, 0), p(11, 10, 6, 100)]);
    // Zombie: gone from the list, parent not grown yet; parent writes 3.
    assert_eq!(j.update(&[p(10, 1, 5, 3)]).write_bytes, 100);
    // Reaped: the parent gains the child's final 120 plus 2 more of its own.
    let t = j.update(&[p(10, 1, 5, 125)]);
    assert_eq!(t.write_bytes, 125, "100 + 20 unseen + 3 + 2");
}

#[test]
fn exit_reaped_outside_the_job_keeps_what_was_counted() {
    // Orphan reparented to init: nothing absorbs it, the total stays.
    let mut j = JobIo::new();
    j.update(&[p(10, 1, 5, 7), p(11, 1, 6, 100)]);
    let t = j.update(&[p(10, 1, 5, 7)]);
    assert_eq!(t.write_bytes, 107);
}

#[test]
fn grandchild_credit_moves_up_through_a_vanished_parent() {
    // 10 -> 11 -> 12; 12 exits and is reaped by 11, then 11 by 10, between ticks.
    let mut j = JobIo::new();
    j.update(&[p(10, 1, 5, 0), p(11, 10, 6, 10), p(12, 11, 7, 50)]);
    assert_eq!(j.total().write_bytes, 60);
    // 10 now holds 11's final (10 + 12's final 80) = 90.
    let t = j.update(&[p(10, 1, 5, 90)]);
    assert_eq!(t.write_bytes, 90);
}

#[test]
fn pid_reuse_is_a_new_process() {
    let mut j = JobIo::new();
    j.update(&[p(10, 1, 5, 0), p(11, 1, 6, 500)]);
    // PID 11 exited (reaped outside) and was reused by a process started later.
    let t = j.update(&[p(10, 1, 5, 0), p(11, 10, 99, 20)]);
    assert_eq!(
        t.write_bytes, 520,
        "old 500 kept, new 20 added, no negative delta"
    );
}

#[test]
fn total_never_decreases_even_on_odd_readings() {
    let mut j = JobIo::new();
    let mut last = 0;
    let readings = [
        vec![p(10, 1, 5, 100)],
        vec![p(10, 1, 5, 40)], // a counter going back (cannot happen): ignored
        vec![],
        vec![p(10, 1, 5, 60)],
        vec![p(20, 10, 8, 1)],
    ];
    for r in readings {
        let t = j.update(&r).write_bytes;
        assert!(t >= last, "{t} < {last}");
        last = t;
    }
}

#[test]
fn parent_cycle_in_stale_links_terminates() {
    let mut j = JobIo::new();
    j.update(&[p(10, 11, 5, 1), p(11, 10, 6, 1), p(12, 1, 7, 0)]);
    assert_eq!(j.update(&[p(12, 1, 7, 0)]).write_bytes, 2);
}

mod linuxproc {
    use std::path::PathBuf;

    use crate::attrib::linuxproc::{
        ProcNode, assign_jobs, job_from_environ, parse_slurmstepd_cmdline,
    };

    fn fixture(name: &str) -> Vec<u8> {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/linuxproc")
            .join(name);
        std::fs::read(p).expect("fixture")
    }

    #[test]
    fn recorded_slurmstepd_and_environ() {
        assert_eq!(
            parse_slurmstepd_cmdline(&fixture("slurmstepd.cmdline")),
            Some((4, "batch".to_string()))
        );
        assert_eq!(job_from_environ(&fixture("batch.environ")), Some(4));
        assert_eq!(
            parse_slurmstepd_cmdline(b"slurmstepd: [42.extern]\0"),
            Some((42, "extern".into()))
        );
        assert_eq!(
            parse_slurmstepd_cmdline(b"slurmstepd: [7+1.0]\0"),
            Some((7, "0".into()))
        );
        for bad in [
            &b"slurmstepd\0"[..],
            b"slurmstepd: [x.0]",
            b"slurmstepd: [4.]",
            b"\xff\xfe",
            b"",
        ] {
            assert_eq!(parse_slurmstepd_cmdline(bad), None, "{bad:?}");
        }
        assert_eq!(job_from_environ(b"A=1\0SLURM_JOBID=9\0"), Some(9));
        assert_eq!(job_from_environ(b"SLURM_JOB_ID=x\0"), None);
        assert_eq!(job_from_environ(b"\0\0"), None);
    }

    #[test]
    fn ancestry_maps_descendants_and_leaves_others_out() {
        let n = |pid, ppid, stepd_job| ProcNode {
            pid,
            ppid,
            stepd_job,
        };
        let procs = [
            n(1, 0, None),
            n(100, 1, Some(4)), // slurmstepd [4.batch]
            n(101, 100, None),  // batch shell
            n(102, 101, None),  // dd
            n(200, 1, Some(5)), // slurmstepd [5.0]
            n(201, 200, None),
            n(300, 1, None), // sshd, not a job
            n(301, 300, None),
            n(400, 401, None), // a parent loop (stale links)
            n(401, 400, None),
        ];
        let m = assign_jobs(&procs);
        assert_eq!(m.get(&102), Some(&4));
        assert_eq!(m.get(&101), Some(&4));
        assert_eq!(m.get(&100), Some(&4));
        assert_eq!(m.get(&201), Some(&5));
        for outside in [1, 300, 301, 400, 401] {
            assert_eq!(m.get(&outside), None, "{outside}");
        }
    }
}

mod k8s {
    use crate::attrib::k8s::{Qos, parse_pod_cgroup};

    const UID: &str = "6f1c2a7e-3b4d-4e5f-8a9b-0c1d2e3f4a5b";

    #[test]
    fn both_cgroup_drivers_and_all_qos_classes() {
        let cases = [
            (
                format!("/kubepods/burstable/pod{UID}/0123abcd"),
                Qos::Burstable,
            ),
            (format!("/kubepods/besteffort/pod{UID}"), Qos::BestEffort),
            (format!("/kubepods/pod{UID}/cafe"), Qos::Guaranteed),
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-ab12.scope",
                    UID.replace('-', "_")
                ),
                Qos::Burstable,
            ),
            (
                format!(
                    "/kubepods.slice/kubepods-pod{}.slice",
                    UID.replace('-', "_")
                ),
                Qos::Guaranteed,
            ),
        ];
        for (path, qos) in cases {
            let p = parse_pod_cgroup(&path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!((p.uid.as_str(), p.qos), (UID, qos), "{path}");
        }
        assert_eq!(Qos::BestEffort.as_str(), "BestEffort");
    }

    #[test]
    fn not_pods() {
        for path in [
            "/",
            "/system.slice/slurmstepd.scope/job_4",
            "/kubepods",
            "/kubepods/burstable",
            "/kubepods/burstable/podnot-a-uid",
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podzz.slice",
            "/slurm_localhost/uid_1002/job_2/step_batch",
        ] {
            assert_eq!(parse_pod_cgroup(path), None, "{path}");
        }
    }
}
