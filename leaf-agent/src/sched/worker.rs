//! The shell around `scontrol`: one background thread answers questions
//! from a bounded queue, each call with a timeout and a bounded output.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::time::{Duration, Instant};

use super::{JobMeta, parse_scontrol_job};
use crate::error::LeafError;

/// Output beyond this is cut (one job's line is about 1.5 KiB).
const MAX_OUTPUT: u64 = 256 * 1024;

/// Runs `program show job -o <id>` and parses the answer.
pub fn query_job(program: &str, job_id: u64, timeout: Duration) -> Result<JobMeta, LeafError> {
    let fail = |reason: String| LeafError::Scheduler { job_id, reason };
    let mut child = Command::new(program)
        .args(["show", "job", "-o", &job_id.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| fail(format!("cannot run {program}: {e}")))?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| fail("no stdout pipe".into()))?;
    // Read on a helper thread so a full pipe cannot block the timeout.
    let reader = std::thread::spawn(move || {
        let mut buf = String::new();
        let _ = (&mut stdout).take(MAX_OUTPUT).read_to_string(&mut buf);
        buf
    });
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if t0.elapsed() < timeout => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!("{program} timed out after {timeout:?}")));
            }
            Err(e) => return Err(fail(format!("waiting for {program}: {e}"))),
        }
    };
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(fail(format!("{program} exited with {status}")));
    }
    parse_scontrol_job(&text, job_id)
}

/// A background thread answering "what is job N?" questions.
#[derive(Debug)]
pub struct ScontrolWorker {
    ask: SyncSender<u64>,
    answers: Receiver<(u64, Result<JobMeta, LeafError>)>,
}

impl ScontrolWorker {
    /// Starts the thread; `program` is normally `scontrol`.
    pub fn spawn(program: &str, timeout: Duration) -> std::io::Result<Self> {
        let (ask, questions) = mpsc::sync_channel::<u64>(64);
        let (tell, answers) = mpsc::sync_channel(64);
        let program = program.to_string();
        std::thread::Builder::new()
            .name("canopy-scontrol".into())
            .spawn(move || {
                for id in questions {
                    if tell.send((id, query_job(&program, id, timeout))).is_err() {
                        break;
                    }
                }
            })?;
        Ok(ScontrolWorker { ask, answers })
    }

    /// Queues a question; false when the queue is full or the thread died.
    pub fn ask(&self, job_id: u64) -> bool {
        match self.ask.try_send(job_id) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }

    /// The answers that arrived since the last call.
    pub fn answers(&self) -> Vec<(u64, Result<JobMeta, LeafError>)> {
        let mut out = Vec::new();
        loop {
            match self.answers.try_recv() {
                Ok(a) => out.push(a),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return out,
            }
        }
    }
}
