//! The audit writer: one task owns the chain state and the sink; file I/O runs on the
//! blocking pool, one batch at a time.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

use super::record::{chain, Entry, GENESIS};
use crate::config::OnFailure;
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
/// their requests/s at saturation (BENCHMARKS.md, eighth round), so it stays short.
const LINGER: Duration = Duration::from_millis(2);

enum Msg {
    Record(Box<Entry>),
    Flush(oneshot::Sender<()>),
}

pub struct AuditLog {
    tx: Option<mpsc::Sender<Msg>>,
    healthy: Arc<AtomicBool>,
    fail_closed: bool,
    target: String,
}

impl AuditLog {
    /// `path` is `stdout`, `off`, or a file (appended to; its chain is continued).
    pub fn start(path: &str, on_failure: OnFailure, metrics: Arc<Metrics>) -> AuditLog {
        let fail_closed = on_failure == OnFailure::FailClosed;
        if path == "off" {
            return AuditLog {
                tx: None,
                healthy: Arc::new(AtomicBool::new(true)),
                fail_closed,
                target: "off".into(),
            };
        }
        let sink = if path == "stdout" {
            Sink::Stdout
        } else {
            Sink::File {
                path: PathBuf::from(path),
                file: None,
            }
        };
        // Found out now, not after the first call has already been forwarded unrecorded.
        let writable = match &sink {
            Sink::Stdout => true,
            Sink::File { path, .. } => {
                match OpenOptions::new().create(true).append(true).open(path) {
                    Ok(_) => true,
                    Err(error) => {
                        tracing::error!(path = %path.display(), %error, "audit log cannot be opened; refusing calls until it can");
                        false
                    }
                }
            }
        };
        let healthy = Arc::new(AtomicBool::new(writable));
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(rx, sink, healthy.clone(), metrics));
        AuditLog {
            tx: Some(tx),
            healthy,
            fail_closed,
            target: path.to_string(),
        }
    }

    /// Whether records are kept at all (`audit.path` is not `off`).
    pub fn is_on(&self) -> bool {
        self.tx.is_some()
    }

    /// Where records go, for the operator.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Calls must be refused: the log can't be written and the setting is fail_closed.
    pub fn refuses_calls(&self) -> bool {
        self.fail_closed && !self.healthy.load(Ordering::Relaxed)
    }

    /// Queues a record, waiting when the queue is full (records are never dropped).
    pub async fn record(&self, entry: Entry) {
        if let Some(tx) = &self.tx {
            if tx.send(Msg::Record(Box::new(entry))).await.is_err() {
                tracing::error!("audit writer stopped; record not written");
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
    fn resume(&mut self) -> (u64, String) {
        let Sink::File { path, .. } = self else {
            return (0, GENESIS.into());
        };
        match last_line(path) {
            Some(line) => match serde_json::from_str::<Tail>(&line) {
                Ok(tail) => (tail.seq, tail.hash),
                Err(_) => {
                    tracing::warn!(path = %path.display(), "the audit log's last line is not a record; starting a new chain after it");
                    (0, GENESIS.into())
                }
            },
            None => (0, GENESIS.into()),
        }
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

async fn run(
    mut rx: mpsc::Receiver<Msg>,
    sink: Sink,
    healthy: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
) {
    let resumed = tokio::task::spawn_blocking(move || {
        let mut sink = sink;
        let position = sink.resume();
        (sink, position)
    })
    .await;
    let Ok((mut sink, (mut seq, mut prev))) = resumed else {
        tracing::error!("audit writer could not start");
        return;
    };
    let mut pending: Vec<String> = Vec::new();
    let mut batch = Vec::with_capacity(BATCH);
    let mut acks: Vec<oneshot::Sender<()>> = Vec::new();
    loop {
        let closed = if pending.len() >= MAX_PENDING {
            tokio::time::sleep(RETRY).await;
            false
        } else if pending.is_empty() && healthy.load(Ordering::Relaxed) {
            let closed = rx.recv_many(&mut batch, BATCH).await == 0;
            let flushing = batch.iter().any(|m| matches!(m, Msg::Flush(_)));
            if !closed && !flushing && batch.len() < BATCH {
                // Group commit: under load, records arrive a few per microsecond; waiting
                // a moment gathers them into one write instead of one per wake-up.
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
            matches!(
                tokio::time::timeout(RETRY, rx.recv_many(&mut batch, BATCH)).await,
                Ok(0)
            )
        };
        for msg in batch.drain(..) {
            match msg {
                Msg::Record(entry) => {
                    seq += 1;
                    let (line, hash) = chain(&entry, seq, &prev);
                    prev = hash;
                    pending.push(line);
                }
                Msg::Flush(ack) => acks.push(ack),
            }
        }
        // An empty write still opens the file: a sink that failed is probed every RETRY.
        if !pending.is_empty() || !healthy.load(Ordering::Relaxed) {
            let lines = std::mem::take(&mut pending);
            let (back, lines, result) = match tokio::task::spawn_blocking(move || {
                let result = sink.write(&lines);
                (sink, lines, result)
            })
            .await
            {
                Ok(done) => done,
                Err(e) => {
                    tracing::error!(error = %e, "audit writer crashed");
                    return;
                }
            };
            sink = back;
            match result {
                Ok(()) => {
                    metrics.audit_records.inc_by(lines.len() as u64);
                    if !healthy.swap(true, Ordering::Relaxed) {
                        tracing::info!("audit log writable again");
                    }
                }
                Err(error) => {
                    if healthy.swap(false, Ordering::Relaxed) {
                        tracing::error!(%error, "audit log cannot be written; refusing calls until it can");
                    }
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
    }
}
