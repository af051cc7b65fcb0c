//! The audit writer: one task owns the chain state and the sink; file I/O runs on the
//! blocking pool, one batch at a time.
//!
//! The log is not writable until the sink has taken a record: the writer's first act is
//! the `start` record, so a sink that opens but can't be written (a full disk) is known
//! before the first call, and with `fail_closed` no call is forwarded until a write has
//! succeeded again after any failure.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

use super::key::{scheme, AuditKey, KeyError};
use super::privacy::Privacy;
use super::record::{
    chain, now, ApprovalEvent, Entry, Published, Record, Start, Suppressed, GENESIS,
};
use crate::config::{Audit, OnFailure};
use crate::telemetry::metrics::Metrics;

const QUEUE: usize = 8192;
const BATCH: usize = 512;
/// Linked lines kept while the sink is failing; past this, calls wait.
const MAX_PENDING: usize = 65_536;
const RETRY: Duration = Duration::from_secs(1);
/// How long a batch waits for more records before it is written: the log trails calls
/// by at most this much, and a busy sidecar writes (and wakes a blocking thread) a few
/// hundred times a second rather than once every few calls. A flush doesn't wait for it.
/// 10 ms cut a call's context switches at 1,000 calls/s but cost full calls ~10% of
/// their requests/s at saturation (docs/bench-history.md, eighth round), so it stays short.
const LINGER: Duration = Duration::from_millis(2);

enum Msg {
    /// A call's record is boxed inside `Record`, so the queue's slots stay small and a
    /// call costs one allocation.
    Record(Record),
    Flush(oneshot::Sender<()>),
}

/// A handle on the log; clones share one writer.
#[derive(Clone)]
pub struct AuditLog {
    tx: Option<mpsc::Sender<Msg>>,
    state: Arc<State>,
    fail_closed: bool,
    target: String,
    /// Keyed digests and header redaction for call records (`None` when the log is off).
    privacy: Option<Privacy>,
}

/// What the writer tells the rest of the sidecar, read without waiting on it.
#[derive(Default)]
struct State {
    /// The sink took a record, and no write failed since.
    writable: AtomicBool,
    /// The `seq` of the last record the sink took: what `audit verify --expect-seq` checks.
    last_seq: AtomicU64,
    /// Why the sink is not writable, for `/readyz`.
    failure: Mutex<Option<String>>,
    /// `toolgate_audit_writable`: follows `writable`.
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl State {
    fn new(metrics: &Metrics) -> State {
        State {
            gauge: metrics.audit_writable.clone(),
            ..State::default()
        }
    }

    fn failed(&self, why: String) {
        *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        self.set_writable(false);
    }

    /// Sets `writable` (and its gauge); whether it was writable before.
    fn set_writable(&self, writable: bool) -> bool {
        self.gauge.set(i64::from(writable));
        self.writable.swap(writable, Ordering::Relaxed)
    }
}

/// The log's state, for `/readyz` and `/config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub writable: bool,
    pub last_seq: u64,
    pub failure: Option<String>,
}

impl AuditLog {
    /// Starts the writer for `settings.path` (`stdout`, `off`, or a file appended to
    /// with its chain continued); `settings_digest` goes into the `start` record.
    pub fn start(
        settings: &Audit,
        settings_digest: String,
        metrics: Arc<Metrics>,
    ) -> Result<AuditLog, KeyError> {
        let fail_closed = settings.on_failure == OnFailure::FailClosed;
        let state = Arc::new(State::new(&metrics));
        if settings.path == "off" {
            state.set_writable(true);
            return Ok(AuditLog {
                tx: None,
                state,
                fail_closed,
                target: "off".into(),
                privacy: None,
            });
        }
        let key = settings
            .key_file
            .as_deref()
            .map(AuditKey::load)
            .transpose()?;
        let sink = if settings.path == "stdout" {
            Sink::Stdout
        } else {
            Sink::File {
                path: PathBuf::from(&settings.path),
                file: None,
            }
        };
        *state.failure.lock().unwrap_or_else(|p| p.into_inner()) =
            Some("the start record is not written yet".into());
        let start = Start {
            ts: now(),
            toolgate: env!("CARGO_PKG_VERSION"),
            settings_digest,
            chain: scheme(key.as_ref()),
            key_id: key.as_ref().map(AuditKey::id),
            truncated_bytes: None,
        };
        let privacy = Privacy::new(key.clone(), &settings.redact_headers);
        let (tx, rx) = mpsc::channel(QUEUE);
        let writer = Writer {
            sink,
            key,
            state: state.clone(),
            metrics,
        };
        tokio::spawn(writer.run(rx, start));
        Ok(AuditLog {
            tx: Some(tx),
            state,
            fail_closed,
            target: settings.path.clone(),
            privacy: Some(privacy),
        })
    }

    /// Whether records are kept at all (`audit.path` is not `off`).
    pub fn is_on(&self) -> bool {
        self.tx.is_some()
    }

    /// How call records treat secrets (`argsDigest`, captured headers); `None` when no
    /// log is kept.
    pub fn privacy(&self) -> Option<Privacy> {
        self.privacy.clone()
    }

    /// Where records go, for the operator.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Calls must be refused: the log can't be written and the setting is fail_closed.
    pub fn refuses_calls(&self) -> bool {
        self.fail_closed && !self.state.writable.load(Ordering::Relaxed)
    }

    pub fn status(&self) -> Status {
        Status {
            writable: self.state.writable.load(Ordering::Relaxed),
            last_seq: self.state.last_seq.load(Ordering::Relaxed),
            failure: self
                .state
                .failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    /// Queues a decision's record, waiting when the queue is full (records are never
    /// dropped).
    pub async fn record(&self, entry: Entry) {
        if let Some(tx) = &self.tx {
            if tx
                .send(Msg::Record(Record::Call(Box::new(entry))))
                .await
                .is_err()
            {
                tracing::error!("audit writer stopped; record not written");
            }
        }
    }

    /// Queues an `approval` record, waiting when the queue is full (never dropped).
    pub async fn record_approval(&self, event: ApprovalEvent) {
        if let Some(tx) = &self.tx {
            if tx.send(Msg::Record(Record::Approval(event))).await.is_err() {
                tracing::error!("audit writer stopped; approval record not written");
            }
        }
    }

    /// Queues a `suppressed` record, waiting when the queue is full (never dropped).
    pub async fn record_suppressed(&self, suppressed: Suppressed) {
        if let Some(tx) = &self.tx {
            let record = Msg::Record(Record::Suppressed(suppressed));
            if tx.send(record).await.is_err() {
                tracing::error!("audit writer stopped; suppressed record not written");
            }
        }
    }

    /// Queues a `policy` record for a snapshot about to be published. Called from the
    /// control plane, which can't wait: a full queue hands the record to a task, so it
    /// still lands (after calls already queued, which name their own policy version).
    pub fn record_policy(&self, policy_version: u64, digest: &str) {
        let Some(tx) = &self.tx else {
            return;
        };
        let record = Msg::Record(Record::Policy(Published {
            ts: now(),
            policy_version,
            digest: digest.to_string(),
        }));
        match tx.try_send(record) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(record)) => {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _ = tx.send(record).await;
                });
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::error!("audit writer stopped; policy record not written");
            }
        }
    }

    /// Waits until everything queued before this call is written (or failed).
    pub async fn flush(&self) {
        if let Some(tx) = &self.tx {
            let (ack, done) = oneshot::channel();
            if tx.send(Msg::Flush(ack)).await.is_ok() {
                let _ = done.await;
            }
        }
    }
}

enum Sink {
    Stdout,
    File { path: PathBuf, file: Option<File> },
}

impl Sink {
    /// The chain position to continue from: the last record of an existing regular file,
    /// read from its tail (a log can be large; a device such as /dev/full never ends).
    /// A torn last line (a crash mid-write: no newline) was never acknowledged; it is
    /// cut off, and the number of bytes cut goes into the `start` record.
    fn resume(&mut self) -> Resumed {
        let mut resumed = Resumed {
            seq: 0,
            prev: GENESIS.into(),
            truncated_bytes: None,
        };
        let Sink::File { path, .. } = self else {
            return resumed;
        };
        match cut_torn_tail(path) {
            Ok(Some(cut)) => {
                tracing::warn!(path = %path.display(), bytes = cut, "the audit log ended in a torn record (a crash mid-write); cut it off");
                resumed.truncated_bytes = Some(cut);
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "could not check the audit log's last line");
            }
        }
        if let Some(line) = last_line(path) {
            match serde_json::from_str::<Tail>(&line) {
                Ok(tail) => {
                    resumed.seq = tail.seq;
                    resumed.prev = tail.hash;
                }
                Err(_) => {
                    tracing::warn!(path = %path.display(), "the audit log's last line is not a record; starting a new chain after it");
                }
            }
        }
        resumed
    }

    /// Writes whole lines or nothing: a failed write is cut back to where it started,
    /// so a full disk never leaves half a record in the chain.
    fn write(&mut self, lines: &[String]) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
        for line in lines {
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
        }
        match self {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(&buf)?;
                out.flush()
            }
            Sink::File { path, file } => {
                let f = match file {
                    Some(f) => f,
                    None => file.insert(OpenOptions::new().create(true).append(true).open(&*path)?),
                };
                let start = f.seek(SeekFrom::End(0))?;
                let result = f.write_all(&buf).and_then(|_| f.flush());
                if result.is_err() {
                    let _ = f.set_len(start);
                    *file = None;
                }
                result
            }
        }
    }
}

struct Resumed {
    seq: u64,
    prev: String,
    truncated_bytes: Option<u64>,
}

/// Cuts a regular file back to its last newline; returns how many bytes were cut.
fn cut_torn_tail(path: &std::path::Path) -> std::io::Result<Option<u64>> {
    let mut file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() == 0 {
        return Ok(None);
    }
    let len = meta.len();
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(None);
    }
    // Search back for the newline that ends the last whole record.
    let mut end = len;
    let mut keep = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > 0 && keep == 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let buf = &mut chunk[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(buf)?;
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            keep = start + i as u64 + 1;
        }
        end = start;
    }
    file.set_len(keep)?;
    Ok(Some(len - keep))
}

#[derive(serde::Deserialize)]
struct Tail {
    seq: u64,
    hash: String,
}

/// Longest record a log's tail is searched for.
const MAX_TAIL: u64 = 1 << 20;

/// The last non-empty line of a regular file, reading at most its last [`MAX_TAIL`] bytes.
fn last_line(path: &std::path::Path) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let start = meta.len().saturating_sub(MAX_TAIL);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = Vec::new();
    file.take(MAX_TAIL).read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(str::to_string)
}

/// The writer task's own state: the sink and how lines are sealed.
struct Writer {
    sink: Sink,
    key: Option<AuditKey>,
    state: Arc<State>,
    metrics: Arc<Metrics>,
}

impl Writer {
    async fn run(self, mut rx: mpsc::Receiver<Msg>, mut start: Start) {
        let Writer {
            sink,
            key,
            state,
            metrics,
        } = self;
        let resumed = tokio::task::spawn_blocking(move || {
            let mut sink = sink;
            let position = sink.resume();
            (sink, position)
        })
        .await;
        let Ok((mut sink, resumed)) = resumed else {
            state.failed("the audit writer could not start".into());
            tracing::error!("audit writer could not start");
            return;
        };
        let (mut seq, mut prev) = (resumed.seq, resumed.prev);
        start.truncated_bytes = resumed.truncated_bytes;
        // The first line written, before anything queued: nothing is forwarded until
        // the sink has taken it (with fail_closed).
        let mut pending: Vec<String> = Vec::new();
        seq += 1;
        let (line, hash) = chain(&Record::Start(start), seq, &prev, key.as_ref());
        prev = hash;
        pending.push(line);
        let mut failing = false;
        let mut batch = Vec::with_capacity(BATCH);
        let mut acks: Vec<oneshot::Sender<()>> = Vec::new();
        loop {
            let closed = if pending.len() >= MAX_PENDING {
                tokio::time::sleep(RETRY).await;
                false
            } else if failing {
                // Retry every RETRY, sooner when records or a flush arrive.
                matches!(
                    tokio::time::timeout(RETRY, rx.recv_many(&mut batch, BATCH)).await,
                    Ok(0)
                )
            } else if pending.is_empty() {
                let closed = rx.recv_many(&mut batch, BATCH).await == 0;
                let flushing = batch.iter().any(|m| matches!(m, Msg::Flush(_)));
                if !closed && !flushing && batch.len() < BATCH {
                    // Group commit: under load, records arrive a few per microsecond;
                    // waiting a moment gathers them into one write instead of one per
                    // wake-up.
                    tokio::time::sleep(LINGER).await;
                    while batch.len() < BATCH {
                        match rx.try_recv() {
                            Ok(msg) => batch.push(msg),
                            Err(_) => break,
                        }
                    }
                }
                closed
            } else {
                // The start record: written before anything is waited for.
                false
            };
            for msg in batch.drain(..) {
                match msg {
                    Msg::Record(record) => {
                        seq += 1;
                        let (line, hash) = chain(&record, seq, &prev, key.as_ref());
                        prev = hash;
                        pending.push(line);
                    }
                    Msg::Flush(ack) => acks.push(ack),
                }
            }
            if !pending.is_empty() {
                let lines = std::mem::take(&mut pending);
                let (back, lines, result) = match tokio::task::spawn_blocking(move || {
                    let result = sink.write(&lines);
                    (sink, lines, result)
                })
                .await
                {
                    Ok(done) => done,
                    Err(e) => {
                        state.failed(format!("the audit writer crashed: {e}"));
                        tracing::error!(error = %e, "audit writer crashed");
                        return;
                    }
                };
                sink = back;
                match result {
                    Ok(()) => {
                        metrics.audit_records.inc_by(lines.len() as u64);
                        state.last_seq.store(seq, Ordering::Relaxed);
                        // Only a record taken makes the log writable: opening a sink
                        // proves nothing (/dev/full opens fine).
                        if !state.set_writable(true) {
                            *state.failure.lock().unwrap_or_else(|p| p.into_inner()) = None;
                            if failing {
                                tracing::info!("audit log writable again");
                            }
                        }
                        failing = false;
                    }
                    Err(error) => {
                        if !failing {
                            tracing::error!(%error, "audit log cannot be written; refusing calls until it can");
                        }
                        state.failed(format!("the audit log cannot be written: {error}"));
                        failing = true;
                        pending = lines;
                    }
                }
            }
            for ack in acks.drain(..) {
                let _ = ack.send(());
            }
            if closed && pending.is_empty() {
                return;
            }
            if closed && failing {
                // Nothing more will come; keep retrying what is pending until it lands.
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}
