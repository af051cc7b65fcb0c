//! The span processor: a finished span is encoded for OTLP on the thread that ended it
//! ([`super::otlp_encode`]) and queued as bytes; a worker thread sends them to the
//! collector in batches ([`super::otlp_send`]), so telemetry can never slow or break a
//! call.
//!
//! - At most `cap` spans are queued or being exported; past it a span is dropped and
//!   counted in `toolgate_spans_dropped_total`. With the collector down or slow, calls keep
//!   their latency: nothing on a call's path waits for the queue or the exporter.
//! - The queue takes memory only for the spans in it, and little for each: an encoded
//!   span is a few hundred bytes where an SDK `SpanData` holds several kilobytes in small
//!   allocations (4,096 of those were 13-27 MB of RSS under load). The queue is one
//!   buffer behind a mutex that the worker swaps for a fresh one sized to the last
//!   export, so an idle sidecar keeps almost nothing; the admission count is the bound.
//! - Spans whose export fails (after the sender's retries) are lost: they count in
//!   `toolgate_spans_dropped_total` with those the queue refused, and the failed request
//!   in `toolgate_telemetry_export_failures_total{signal="traces"}`, logged at `warn`
//!   at most every 30 s ([`super::export_failure`]). Spans that shutdown's timeout cuts
//!   off are not counted: the process is ending.
//! - A call never wakes the worker for its span: the worker sleeps on a control channel
//!   and wakes on a timer ([`DELAY`]), when a batch's worth of spans is waiting, or when
//!   asked to flush or shut down.

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::export_failure::ExportFailures;
use super::otlp_encode::{self, Envelope, Scope};
use super::otlp_send::Sender;
use crate::telemetry::metrics::Metrics;

/// Spans per export request.
const BATCH: usize = 512;
/// The longest a span waits in the queue when fewer than a batch arrive.
const DELAY: Duration = Duration::from_millis(200);
/// How long `force_flush` waits for the worker.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// The most a fresh queue buffer is given up front (a batch of typical spans).
const PRESIZE_BYTES: usize = 512 * 1024;

/// Where the worker sends an encoded `ExportTraceServiceRequest`.
pub trait Transport: Send + 'static {
    fn send(&mut self, request: Vec<u8>) -> Result<(), String>;
    /// Called once, after the last request.
    fn shutdown(&mut self) {}
}

impl Transport for Sender {
    fn send(&mut self, request: Vec<u8>) -> Result<(), String> {
        Sender::send(self, request)
    }
}

/// What the worker is asked to do besides its timer.
enum Control {
    /// A batch's worth of spans has arrived.
    Export,
    Flush(SyncSender<OTelSdkResult>),
    Shutdown(SyncSender<OTelSdkResult>),
    Resource(Resource),
}

/// Encoded spans waiting: one run of `ScopeSpans.spans` entries, and where each ends.
#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

/// What the calls and the worker share.
#[derive(Debug, Default)]
struct Queue {
    pending: Mutex<Pending>,
    /// Spans pending or being exported.
    queued: AtomicUsize,
    /// Set, under the `pending` lock, once the worker has taken its last spans.
    closed: AtomicBool,
    /// The tracer's instrumentation scope, from the first span (the provider has one
    /// tracer, so every span carries the same).
    scope: OnceLock<Scope>,
}

impl Queue {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        // An append can't leave the buffer half-written (it grows before it writes), so
        // a poisoned lock is still usable.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sidecar's span processor (see the module doc).
#[derive(Debug)]
pub struct Batcher {
    queue: Arc<Queue>,
    control: SyncSender<Control>,
    cap: usize,
    metrics: Arc<Metrics>,
    shut: AtomicBool,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl Batcher {
    /// Starts the worker thread. `cap`: spans queued or being exported at most.
    pub fn new<T: Transport>(
        transport: T,
        cap: usize,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Batcher> {
        // Only control messages wait here, and at most one `Export` per batch of arrivals.
        let (control, control_rx) = mpsc::sync_channel(16);
        let queue = Arc::new(Queue::default());
        let worker = Worker {
            transport,
            failures: ExportFailures::new("traces", metrics.clone()),
            metrics: metrics.clone(),
            queue: queue.clone(),
            envelope: Envelope::default(),
            last_spans: 0,
            last_bytes: 0,
        };
        let worker = std::thread::Builder::new()
            .name("toolgate-spans".into())
            .spawn(move || worker.run(control_rx))?;
        Ok(Batcher {
            queue,
            control,
            cap: cap.max(1),
            metrics,
            shut: AtomicBool::new(false),
            worker: Mutex::new(Some(worker)),
        })
    }

    fn drop_span(&self) {
        self.queue.queued.fetch_sub(1, Ordering::AcqRel);
        self.metrics.spans_dropped.inc();
    }

    /// Sends `make(ack)` to the worker and waits up to `timeout` for its answer.
    fn ask(
        &self,
        make: impl FnOnce(SyncSender<OTelSdkResult>) -> Control,
        timeout: Duration,
    ) -> OTelSdkResult {
        let deadline = Instant::now() + timeout;
        let (ack, answer) = mpsc::sync_channel(1);
        // The control channel is bounded: a worker stuck in an export with it full must
        // not hold the caller past its timeout.
        let mut message = make(ack);
        loop {
            match self.control.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return Err(OTelSdkError::AlreadyShutdown),
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TrySendError::Full(_)) => return Err(OTelSdkError::Timeout(timeout)),
            }
        }
        match answer.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(OTelSdkError::Timeout(timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(OTelSdkError::AlreadyShutdown),
        }
    }
}

impl SpanProcessor for Batcher {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        // Counted in only below the cap, so refused spans never crowd out ones that fit.
        let cap = self.cap;
        let admitted = self
            .queue
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            });
        if admitted.is_err() {
            self.metrics.spans_dropped.inc();
            return;
        }
        self.queue.scope.get_or_init(|| Scope::of(&span));
        // Encoded under the lock, straight into the queue: no copy of the span is made.
        let waiting = {
            let mut pending = self.queue.pending();
            if self.queue.closed.load(Ordering::Acquire) {
                None
            } else {
                otlp_encode::append_span(&span, &mut pending.bytes);
                let end = pending.bytes.len();
                pending.ends.push(end);
                Some(pending.ends.len())
            }
        };
        match waiting {
            None => self.drop_span(),
            // A full control channel means the worker is already awake with work to do,
            // and the timer is the backstop either way.
            Some(BATCH) => {
                let _ = self.control.try_send(Control::Export);
            }
            Some(_) => {}
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Control::Flush, FLUSH_TIMEOUT)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        if self.shut.swap(true, Ordering::AcqRel) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        let result = self.ask(Control::Shutdown, timeout);
        // Joined only after a clean answer: a worker stuck in an export is left behind.
        if result.is_ok() {
            let worker = self.worker.lock().ok().and_then(|mut w| w.take());
            if let Some(worker) = worker {
                let _ = worker.join();
            }
        }
        result
    }

    fn set_resource(&mut self, resource: &Resource) {
        let _ = self.control.send(Control::Resource(resource.clone()));
    }
}

/// The thread that owns the transport.
struct Worker<T> {
    transport: T,
    /// Counts and logs failed exports; `metrics` counts their spans as dropped.
    failures: ExportFailures,
    metrics: Arc<Metrics>,
    queue: Arc<Queue>,
    envelope: Envelope,
    /// How many spans, and bytes, the last export took: the size of the next buffer.
    last_spans: usize,
    last_bytes: usize,
}

impl<T: Transport> Worker<T> {
    fn run(mut self, control: Receiver<Control>) {
        // The transport's own work (HTTP, gRPC) must not make spans of its own.
        let _quiet = Context::enter_telemetry_suppressed_scope();
        let mut due = Instant::now() + DELAY;
        loop {
            let wait = due.saturating_duration_since(Instant::now());
            match control.recv_timeout(wait) {
                Ok(Control::Export) | Err(RecvTimeoutError::Timeout) => {
                    // A failed batch is logged where it fails; the next one tries again.
                    let _ = self.export_pending(false);
                    due = Instant::now() + DELAY;
                }
                Ok(Control::Flush(ack)) => {
                    let _ = ack.send(self.export_pending(false));
                }
                Ok(Control::Resource(resource)) => self.envelope.set_resource(&resource),
                Ok(Control::Shutdown(ack)) => {
                    let result = self.export_pending(true);
                    self.transport.shutdown();
                    let _ = ack.send(result);
                    return;
                }
                // The processor is gone without a shutdown: send what is left, then stop.
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.export_pending(true);
                    return;
                }
            }
        }
    }

    /// Exports the spans pending now, in batches of at most [`BATCH`]; with `last`, no
    /// span is accepted after them.
    fn export_pending(&mut self, last: bool) -> OTelSdkResult {
        // The next buffer is allocated here, on this thread, which frees it after the
        // export, so the allocator reuses it; sized to the last export, so an idle
        // sidecar keeps almost nothing; and outside the lock the calls take.
        let next = Pending {
            bytes: Vec::with_capacity(self.last_bytes.min(PRESIZE_BYTES)),
            ends: Vec::with_capacity(self.last_spans.min(BATCH)),
        };
        let taken = {
            let mut pending = self.queue.pending();
            if last {
                self.queue.closed.store(true, Ordering::Release);
            }
            std::mem::replace(&mut *pending, next)
        };
        (self.last_spans, self.last_bytes) = (taken.ends.len(), taken.bytes.len());
        // Set before the first span was queued, so there whenever spans are.
        let unscoped = Scope::default();
        let scope = self.queue.scope.get().unwrap_or(&unscoped);
        let mut result = Ok(());
        let mut start = 0;
        for ends in taken.ends.chunks(BATCH) {
            let end = ends[ends.len() - 1];
            let request = self.envelope.request(scope, &taken.bytes[start..end]);
            start = end;
            let n = ends.len();
            // A panicking transport fails its batch; the worker, and tracing, go on.
            let sent = catch_unwind(AssertUnwindSafe(|| self.transport.send(request)))
                .unwrap_or_else(|_| Err("the exporter panicked".into()));
            self.queue.queued.fetch_sub(n, Ordering::AcqRel);
            match sent {
                Ok(()) => self.failures.succeeded(),
                Err(e) => {
                    self.metrics.spans_dropped.inc_by(n as u64);
                    self.failures.failed(&e, n as u64);
                    result = Err(OTelSdkError::InternalFailure(e));
                }
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;

    /// Collects what it is sent; blocks each export until `open` while `gate` is set.
    #[derive(Debug, Clone, Default)]
    struct Collector {
        sent: Arc<Mutex<Vec<String>>>,
        batches: Arc<AtomicUsize>,
        largest: Arc<AtomicUsize>,
        gate: Arc<(Mutex<bool>, std::sync::Condvar)>,
        shut: Arc<AtomicBool>,
        /// Panics on the next export.
        panic: Arc<AtomicBool>,
    }

    impl Collector {
        fn close(&self) {
            *self.gate.0.lock().unwrap() = true;
        }

        fn open(&self) {
            *self.gate.0.lock().unwrap() = false;
            self.gate.1.notify_all();
        }

        fn names(&self) -> Vec<String> {
            self.sent.lock().unwrap().clone()
        }
    }

    impl Transport for Collector {
        fn send(&mut self, request: Vec<u8>) -> Result<(), String> {
            if self.panic.swap(false, Ordering::SeqCst) {
                panic!("exporter bug");
            }
            let mut closed = self.gate.0.lock().unwrap();
            while *closed {
                closed = self.gate.1.wait(closed).unwrap();
            }
            let request = ExportTraceServiceRequest::decode(request.as_slice()).unwrap();
            let spans = &request.resource_spans[0].scope_spans[0].spans;
            self.batches.fetch_add(1, Ordering::SeqCst);
            self.largest.fetch_max(spans.len(), Ordering::SeqCst);
            let mut sent = self.sent.lock().unwrap();
            sent.extend(spans.iter().map(|s| s.name.clone()));
            Ok(())
        }

        fn shutdown(&mut self) {
            self.shut.store(true, Ordering::SeqCst);
        }
    }

    fn span(name: String) -> SpanData {
        otlp_encode::tests::span(&name, &Default::default())
    }

    fn dropped(metrics: &Metrics) -> u64 {
        metrics.spans_dropped.get()
    }

    #[test]
    fn flush_exports_everything_queued_in_order_and_in_batches() {
        let collector = Collector::default();
        let batcher = Batcher::new(collector.clone(), 4096, Arc::new(Metrics::new())).unwrap();
        // Held back while they arrive, so one drain takes all 1,500 and must split them.
        collector.close();
        for i in 0..1500 {
            batcher.on_end(span(format!("s{i}")));
        }
        collector.open();
        batcher.force_flush().unwrap();
        let names = collector.names();
        assert_eq!(names.len(), 1500);
        assert!(names.iter().enumerate().all(|(i, n)| *n == format!("s{i}")));
        assert!(collector.largest.load(Ordering::SeqCst) <= BATCH);
        assert!(collector.batches.load(Ordering::SeqCst) >= 3);
        assert_eq!(batcher.queue.queued.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn spans_leave_on_the_timer_without_a_flush() {
        let collector = Collector::default();
        let batcher = Batcher::new(collector.clone(), 4096, Arc::new(Metrics::new())).unwrap();
        batcher.on_end(span("one".into()));
        let started = Instant::now();
        while collector.names().is_empty() {
            assert!(started.elapsed() < Duration::from_secs(5), "never exported");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(collector.names(), ["one"]);
    }

    #[test]
    fn past_the_cap_spans_are_dropped_counted_and_never_waited_for() {
        let collector = Collector::default();
        let metrics = Arc::new(Metrics::new());
        let batcher = Batcher::new(collector.clone(), 10, metrics.clone()).unwrap();
        collector.close();
        let started = Instant::now();
        for i in 0..100 {
            batcher.on_end(span(format!("s{i}")));
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(dropped(&metrics), 90);
        collector.open();
        batcher.force_flush().unwrap();
        assert_eq!(collector.names().len(), 10);
        // Exported spans free their room.
        batcher.on_end(span("later".into()));
        batcher.force_flush().unwrap();
        assert_eq!(collector.names().last().unwrap(), "later");
        assert_eq!(dropped(&metrics), 90);
    }

    #[test]
    fn shutdown_sends_what_is_left_once_and_then_refuses() {
        let collector = Collector::default();
        let metrics = Arc::new(Metrics::new());
        let batcher = Batcher::new(collector.clone(), 4096, metrics.clone()).unwrap();
        for i in 0..3 {
            batcher.on_end(span(format!("s{i}")));
        }
        batcher
            .shutdown_with_timeout(Duration::from_secs(5))
            .unwrap();
        assert_eq!(collector.names(), ["s0", "s1", "s2"]);
        assert!(collector.shut.load(Ordering::SeqCst));
        assert!(matches!(
            batcher.shutdown_with_timeout(Duration::from_secs(1)),
            Err(OTelSdkError::AlreadyShutdown)
        ));
        // After shutdown a span is dropped and counted, not queued forever.
        batcher.on_end(span("late".into()));
        assert_eq!(dropped(&metrics), 1);
        assert!(batcher.force_flush().is_err());
    }

    #[test]
    fn a_dropped_processor_still_sends_what_it_holds() {
        let collector = Collector::default();
        let batcher = Batcher::new(collector.clone(), 4096, Arc::new(Metrics::new())).unwrap();
        batcher.on_end(span("last".into()));
        drop(batcher);
        let started = Instant::now();
        while collector.names().is_empty() {
            assert!(started.elapsed() < Duration::from_secs(5), "never exported");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(collector.names(), ["last"]);
    }

    #[test]
    fn a_panicking_exporter_fails_its_batch_and_tracing_goes_on() {
        let collector = Collector::default();
        let batcher = Batcher::new(collector.clone(), 4096, Arc::new(Metrics::new())).unwrap();
        collector.panic.store(true, Ordering::SeqCst);
        batcher.on_end(span("lost".into()));
        // An error, or Ok if the timer took the span first: either way it panicked.
        let _ = batcher.force_flush();
        batcher.on_end(span("kept".into()));
        batcher.force_flush().unwrap();
        assert_eq!(collector.names(), ["kept"]);
        assert_eq!(batcher.queue.queued.load(Ordering::SeqCst), 0);
        // The lost span is dropped, and its failed export counted.
        assert_eq!(dropped(&batcher.metrics), 1);
        let text = batcher.metrics.encode();
        assert!(
            text.contains("toolgate_telemetry_export_failures_total{signal=\"traces\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn a_stuck_export_bounds_shutdown_by_its_timeout() {
        let collector = Collector::default();
        let batcher = Batcher::new(collector.clone(), 4096, Arc::new(Metrics::new())).unwrap();
        collector.close();
        batcher.on_end(span("stuck".into()));
        let started = Instant::now();
        let result = batcher.shutdown_with_timeout(Duration::from_millis(300));
        assert!(
            matches!(result, Err(OTelSdkError::Timeout(_))),
            "{result:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        collector.open();
    }
}
