//! Back-off for collectors of optional devices (RAPL, hwmon, InfiniBand,
//! Lustre, GPUs, PMU): when the device or driver is absent, say so once and
//! look again only rarely, so a node without the hardware pays nothing and
//! logs no storm.

/// Whether a device was found, and when to look again if not.
///
/// Counts calls rather than reading a clock, so it is deterministic and the
/// caller's tick sets the pace (at a 1 s tick, `reprobe_every = 300` looks
/// again every five minutes).
#[derive(Clone, Debug)]
pub struct Probe {
    what: &'static str,
    state: ProbeState,
    reprobe_every: u32,
    countdown: u32,
    notices: u32,
    attempts: u64,
}

/// What the probe knows about the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeState {
    /// Never looked yet.
    Unknown,
    /// Found on the last look.
    Present,
    /// Not found on the last look; looked for again every `reprobe_every` calls.
    Absent,
}

/// How many calls an absent device waits before the next look (5 min at 1 s).
pub const DEFAULT_REPROBE_EVERY: u32 = 300;

impl Probe {
    /// A probe for the device named `what` (used in the log line).
    pub fn new(what: &'static str, reprobe_every: u32) -> Self {
        Probe {
            what,
            state: ProbeState::Unknown,
            reprobe_every: reprobe_every.max(1),
            countdown: 0,
            notices: 0,
            attempts: 0,
        }
    }

    /// Whether the caller should touch the device on this call: always while
    /// present or unknown, once every `reprobe_every` calls while absent.
    pub fn should_try(&mut self) -> bool {
        let go = match self.state {
            ProbeState::Unknown | ProbeState::Present => true,
            ProbeState::Absent => {
                if self.countdown == 0 {
                    true
                } else {
                    self.countdown -= 1;
                    false
                }
            }
        };
        if go {
            self.attempts += 1;
        }
        go
    }

    /// Records that the device answered. Logs once if it was absent before.
    pub fn found(&mut self) {
        if self.state == ProbeState::Absent {
            self.notices += 1;
            tracing::info!(device = self.what, "device now present; collecting");
        }
        self.state = ProbeState::Present;
    }

    /// Records that the device is absent (`why`). Logs one line on the change
    /// to absent, none while it stays absent.
    pub fn missing(&mut self, why: &dyn std::fmt::Display) {
        if self.state != ProbeState::Absent {
            self.notices += 1;
            tracing::info!(
                device = self.what,
                reason = %why,
                reprobe_every_ticks = self.reprobe_every,
                "device not available; exporting nothing for it and looking again rarely"
            );
        }
        self.state = ProbeState::Absent;
        self.countdown = self.reprobe_every - 1;
    }

    /// The current state.
    pub fn state(&self) -> ProbeState {
        self.state
    }

    /// How many log lines the probe has written (for tests and self-metrics).
    pub fn notices(&self) -> u32 {
        self.notices
    }

    /// How many times [`Probe::should_try`] said yes.
    pub fn attempts(&self) -> u64 {
        self.attempts
    }
}
