//! The merge core's limits and per-record summary.

use canopy_proto::codec::CodecConfig;

/// Where a source's R paths meet (the gateway), a section after a hole
/// waits this many ticks for the slower path to fill it. Upstream ack
/// timeouts are planned above it, so a held section never stalls a link.
pub const HOLE_WAIT_TICKS: u32 = 8;

/// Limits of the merge core.
#[derive(Clone, Debug, PartialEq)]
pub struct MergeConfig {
    /// Most series in the global table; updates of further new series are
    /// dropped (counted in [`MergeStats::dropped_over_cap`]).
    pub max_series: usize,
    /// Most series one child link may define; more is a codec error
    /// (`TooManySeries`) for that child.
    pub max_series_per_child: usize,
    /// A source silent this long (in data time versus `now_ms`) is forgotten
    /// with its series on [`Merger::expire`](super::Merger::expire).
    pub source_ttl_ms: i64,
    /// Codec settings of the children links.
    pub codec: CodecConfig,
    /// Where a source's R paths meet (the gateway): how long, in data time,
    /// a section that leaves a hole behind it waits for the hole to fill
    /// from a slower path. 0 (relays): never wait.
    pub hole_wait_ms: i64,
    /// Build the per-tick [`Changeset`](canopy_proto::codec::Changeset) for
    /// uplinks. A merger with no uplink (the root gateway) sets it false:
    /// then accepted data goes to the sink only, and
    /// [`Merger::take_changeset`](super::Merger::take_changeset) returns an
    /// empty changeset, so a tick costs nothing per source that ticked.
    pub forward: bool,
}

impl Default for MergeConfig {
    fn default() -> Self {
        Self {
            max_series: 4 << 20,
            max_series_per_child: 1 << 20,
            source_ttl_ms: 10 * 60 * 1000,
            codec: CodecConfig::default(),
            hole_wait_ms: 0,
            forward: true,
        }
    }
}

/// What one accepted record did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameSummary {
    /// The frame's sequence number on its link.
    pub seq: u64,
    /// The frame's timestamp, ms.
    pub ts_ms: i64,
    /// The frame was a keyframe.
    pub keyframe: bool,
    /// Value updates it carried.
    pub updates: usize,
    /// Updates accepted (passed to the sink).
    pub accepted: usize,
    /// Updates dropped as duplicates.
    pub duplicates: usize,
    /// Series retired globally because of it.
    pub retired: usize,
}
