//! The async shell of remote_write out: the [`Tap`] the store's append path
//! feeds, one task running the [`Tracker`], and one task per endpoint
//! driving its [`SendQueue`] with a hyper HTTP/1 client.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use canopy_proto::link::unix_now_ms;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Uri;
use hyper::header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, HeaderValue, USER_AGENT};
use tokio::sync::{Notify, mpsc, watch};

use super::RemoteWriteError;
use super::endpoint::{EndpointConfig, HttpClient};
use super::queue::{Next, Outcome, QueueConfig, QueueStats, SendQueue, classify};
use super::tracker::{OutSample, TapEvent, Tracker, TrackerConfig, TrackerStats};

/// Settings of the remote_write senders.
#[derive(Clone, Debug)]
pub struct SenderConfig {
    /// Endpoints (`http(s)://host:port/path`, credentials, roots), each
    /// with its own queue.
    pub endpoints: Vec<EndpointConfig>,
    /// Events the tap buffers before it drops (counted).
    pub channel_capacity: usize,
    /// Per-request timeout.
    pub request_timeout: Duration,
    /// How often ticks are flushed and deadlines checked.
    pub poll_interval: Duration,
    /// Sample expansion settings.
    pub tracker: TrackerConfig,
    /// Per-endpoint queue settings.
    pub queue: QueueConfig,
}

impl Default for SenderConfig {
    fn default() -> Self {
        SenderConfig {
            endpoints: Vec::new(),
            channel_capacity: 1 << 18,
            request_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_millis(100),
            tracker: TrackerConfig::default(),
            queue: QueueConfig::default(),
        }
    }
}

/// The entry of the append path into remote_write out. Cheap to clone;
/// never blocks: when the channel is full the event is dropped (counted).
#[derive(Clone, Debug)]
pub struct Tap {
    tx: mpsc::Sender<TapEvent>,
    dropped: Arc<AtomicU64>,
}

impl Tap {
    /// Hands one event to the senders.
    pub fn send(&self, ev: TapEvent) {
        if self.tx.try_send(ev).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n,
                    "remote_write tap full or closed; events dropped"
                );
            }
        }
    }
}

/// Counters of remote_write out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteWriteStats {
    /// Events the tap dropped (channel full).
    pub tap_dropped: u64,
    /// The tracker's counters.
    pub tracker: TrackerStats,
    /// Per endpoint: its URL and queue counters.
    pub endpoints: Vec<(String, QueueStats)>,
}

#[derive(Debug)]
struct Endpoint {
    url: String,
    uri: Uri,
    authorization: Option<HeaderValue>,
    queue: Mutex<SendQueue>,
    notify: Notify,
}

/// Running senders: the tap to feed and their counters.
#[derive(Clone, Debug)]
pub struct RemoteWrite {
    tap: Tap,
    endpoints: Vec<Arc<Endpoint>>,
    tracker: Arc<Mutex<TrackerStats>>,
}

impl RemoteWrite {
    /// The tap to feed.
    pub fn tap(&self) -> Tap {
        self.tap.clone()
    }

    /// Current counters.
    pub fn stats(&self) -> RemoteWriteStats {
        RemoteWriteStats {
            tap_dropped: self.tap.dropped.load(Ordering::Relaxed),
            tracker: *self.tracker.lock().unwrap_or_else(PoisonError::into_inner),
            endpoints: self
                .endpoints
                .iter()
                .map(|e| (e.url.clone(), lock(&e.queue).stats()))
                .collect(),
        }
    }
}

fn lock(q: &Mutex<SendQueue>) -> std::sync::MutexGuard<'_, SendQueue> {
    q.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Checks a remote_write URL: `http://` or `https://` with a host.
pub fn parse_url(url: &str) -> Result<Uri, RemoteWriteError> {
    let bad = |reason: &str| RemoteWriteError::BadUrl {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let uri: Uri = url
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(bad("expected http(s)://host:port/path")),
    }
    if uri.authority().is_none() {
        return Err(bad("no host"));
    }
    Ok(uri)
}

/// Starts the tracker task and one sender per URL; they stop when
/// `shutdown` turns true. Fails on a URL Canopy cannot send to.
pub fn spawn(
    cfg: SenderConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<RemoteWrite, RemoteWriteError> {
    let mut endpoints = Vec::new();
    let mut clients = Vec::new();
    for ec in &cfg.endpoints {
        let uri = parse_url(&ec.url)?;
        let authorization = ec.authorization()?;
        if authorization.is_some() && uri.scheme_str() == Some("http") {
            tracing::warn!(url = %ec.url, "remote_write credentials sent over plain http");
        }
        clients.push(ec.client()?);
        endpoints.push(Arc::new(Endpoint {
            url: ec.url.clone(),
            uri,
            authorization,
            queue: Mutex::new(SendQueue::new(cfg.queue.clone())),
            notify: Notify::new(),
        }));
    }
    let (tx, rx) = mpsc::channel(cfg.channel_capacity.max(1));
    let tap = Tap {
        tx,
        dropped: Arc::new(AtomicU64::new(0)),
    };
    let tracker = Arc::new(Mutex::new(TrackerStats::default()));
    for (ep, client) in endpoints.iter().zip(clients) {
        tokio::spawn(send_loop(
            Arc::clone(ep),
            client,
            cfg.request_timeout,
            shutdown.clone(),
        ));
        tracing::info!(url = %ep.url, "remote_write sender started");
    }
    tokio::spawn(track_loop(
        rx,
        Tracker::new(cfg.tracker.clone()),
        endpoints.clone(),
        Arc::clone(&tracker),
        cfg.poll_interval,
        shutdown,
    ));
    Ok(RemoteWrite {
        tap,
        endpoints,
        tracker,
    })
}

async fn track_loop(
    mut rx: mpsc::Receiver<TapEvent>,
    mut tracker: Tracker,
    endpoints: Vec<Arc<Endpoint>>,
    stats: Arc<Mutex<TrackerStats>>,
    poll: Duration,
    mut sd: watch::Receiver<bool>,
) {
    let mut iv = tokio::time::interval(poll);
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut out: Vec<OutSample> = Vec::new();
    loop {
        tokio::select! {
            ev = rx.recv() => {
                let Some(ev) = ev else { break };
                tracker.on_event(ev, &mut out);
                while out.len() < 1 << 16 {
                    match rx.try_recv() {
                        Ok(ev) => tracker.on_event(ev, &mut out),
                        Err(_) => break,
                    }
                }
            }
            _ = iv.tick() => {
                tracker.poll(unix_now_ms(), &mut out);
                *stats.lock().unwrap_or_else(PoisonError::into_inner) = tracker.stats();
            }
            _ = sd.changed() => break,
        }
        if !out.is_empty() {
            let now = unix_now_ms();
            for ep in &endpoints {
                lock(&ep.queue).push(out.iter().cloned(), now);
                ep.notify.notify_one();
            }
            out.clear();
        }
    }
}

async fn send_loop(
    ep: Arc<Endpoint>,
    client: HttpClient,
    timeout: Duration,
    mut sd: watch::Receiver<bool>,
) {
    loop {
        if *sd.borrow() {
            break;
        }
        let next = lock(&ep.queue).next(unix_now_ms());
        let wait_until = match next {
            Ok(Next::Send(batch)) => {
                let outcome = post(&client, &ep, batch.body, timeout).await;
                let delay = lock(&ep.queue).on_outcome(&outcome, unix_now_ms());
                match (&outcome, delay) {
                    (Outcome::Retry(why), Some(d))
                        if batch.attempt.is_power_of_two() || batch.attempt == 0 =>
                    {
                        tracing::warn!(url = %ep.url, attempt = batch.attempt + 1, retry_in_ms = d, %why, "remote_write send failed, retrying");
                    }
                    (Outcome::Refused(why), _) => {
                        tracing::warn!(url = %ep.url, samples = batch.samples, %why, "remote_write batch refused, dropped");
                    }
                    _ => {}
                }
                continue;
            }
            Ok(Next::WaitUntil(t)) => Some(t),
            Ok(Next::Idle) => None,
            Err(e) => {
                tracing::error!(url = %ep.url, error = %e, "remote_write batch could not be encoded, dropped");
                continue;
            }
        };
        let sleep = async {
            match wait_until {
                Some(t) => {
                    let ms = u64::try_from(t - unix_now_ms()).unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = ep.notify.notified() => {}
            _ = sd.changed() => {}
        }
    }
}

/// One POST; the outcome decides retry or drop.
async fn post(client: &HttpClient, ep: &Endpoint, body: Bytes, timeout: Duration) -> Outcome {
    let mut req = hyper::Request::post(ep.uri.clone());
    if let Some(a) = &ep.authorization {
        req = req.header(AUTHORIZATION, a.clone());
    }
    let req = req
        .header(CONTENT_ENCODING, "snappy")
        .header(CONTENT_TYPE, "application/x-protobuf")
        .header(USER_AGENT, concat!("canopy/", env!("CARGO_PKG_VERSION")))
        .header("X-Prometheus-Remote-Write-Version", "0.1.0")
        .body(Full::new(body));
    let req = match req {
        Ok(r) => r,
        Err(e) => return Outcome::Refused(format!("building the request: {e}")),
    };
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        // Read (a bounded part of) the answer so the connection is reusable.
        let text = match Limited::new(resp.into_body(), 4096).collect().await {
            Ok(b) => String::from_utf8_lossy(&b.to_bytes()).trim().to_string(),
            Err(_) => String::from("(long or unreadable body)"),
        };
        Ok::<_, String>(classify(status, &text))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => Outcome::Retry(e),
        Err(_) => Outcome::Retry(format!("no answer within {timeout:?}")),
    }
}
