//! Which calls' spans are exported (`telemetry.sampler`, DESIGN §11).
//!
//! The decision is made before any span exists, from the agent's `traceparent` and the
//! call's trace id, by the SDK's own samplers (`ParentBased`, `TraceIdRatioBased`): an
//! unsampled call builds no span, and the backend is told with the `traceparent` flags.
//! A sampled call's span is then built by a tracer whose own sampler is `AlwaysOn`, and
//! whose trace id, for a call with no parent, is the one the decision was made on
//! ([`PresetTraceIds`]), so a trace-id ratio means what it says downstream too.
//!
//! With `sampleDenials` an unsampled call keeps only its parent context and start time;
//! if it ends refused, its span is built then, with that start, and exported.

use opentelemetry::trace::{SpanId, SpanKind, TraceContextExt, TraceId};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, ShouldSample,
};
use std::cell::Cell;

use crate::config::{Telemetry, TraceSampler};

/// The configured sampler; `None` when every call is sampled (no decision to make).
#[derive(Debug)]
pub struct Sampling {
    sampler: Option<Sampler>,
    pub sample_denials: bool,
}

/// A sampling decision and the trace id it was made on.
pub struct Decision {
    pub trace_id: TraceId,
    pub sampled: bool,
}

impl Sampling {
    pub fn new(settings: &Telemetry) -> Sampling {
        let ratio = settings.sampler_ratio;
        let parent_based = |root: Sampler| Sampler::ParentBased(Box::new(root));
        let sampler = match settings.sampler {
            TraceSampler::AlwaysOn => None,
            TraceSampler::AlwaysOff => Some(Sampler::AlwaysOff),
            TraceSampler::Traceidratio => Some(Sampler::TraceIdRatioBased(ratio)),
            TraceSampler::ParentbasedAlwaysOn => Some(parent_based(Sampler::AlwaysOn)),
            TraceSampler::ParentbasedAlwaysOff => Some(parent_based(Sampler::AlwaysOff)),
            TraceSampler::ParentbasedTraceidratio => {
                Some(parent_based(Sampler::TraceIdRatioBased(ratio)))
            }
        };
        Sampling {
            sampler,
            sample_denials: settings.sample_denials,
        }
    }

    /// Whether a call under `parent` (the agent's extracted `traceparent`) is sampled.
    /// `None`: always sampled, and the tracer picks the trace id as usual.
    pub fn decide(&self, parent: &Context) -> Option<Decision> {
        let sampler = self.sampler.as_ref()?;
        let span = parent.span();
        let remote = span.span_context();
        let trace_id = if remote.is_valid() {
            remote.trace_id()
        } else {
            RandomIdGenerator::default().new_trace_id()
        };
        let result = sampler.should_sample(Some(parent), trace_id, "", &SpanKind::Server, &[], &[]);
        Some(Decision {
            trace_id,
            // `RecordOnly` is never returned by these samplers; a span that is recorded
            // but not exported would be work for nothing here, so it counts as not sampled.
            sampled: result.decision == SamplingDecision::RecordAndSample,
        })
    }
}

thread_local! {
    /// The trace id the next root span built on this thread takes.
    static PRESET: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// The tracer's id generator: random ids, except for a root span whose trace id the
/// sampling decision already chose ([`with_trace_id`]).
#[derive(Debug, Default)]
pub struct PresetTraceIds {
    random: RandomIdGenerator,
}

impl IdGenerator for PresetTraceIds {
    fn new_trace_id(&self) -> TraceId {
        PRESET.take().unwrap_or_else(|| self.random.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        self.random.new_span_id()
    }
}

/// Runs `build` (which starts one span) so that a root span it starts takes `trace_id`.
/// Span building is synchronous, so the id is taken on this thread or cleared after.
pub fn with_trace_id<T>(trace_id: TraceId, build: impl FnOnce() -> T) -> T {
    /// Clears the preset however `build` ends, unwinding included.
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            PRESET.set(None);
        }
    }
    PRESET.set(Some(trace_id));
    let _clear = Clear;
    build()
}

/// A fresh span id, for the `traceparent` an unsampled call sends the backend.
pub fn new_span_id() -> SpanId {
    RandomIdGenerator::default().new_span_id()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use std::collections::HashMap;

    fn sampling(sampler: TraceSampler, ratio: f64) -> Sampling {
        Sampling::new(&Telemetry {
            sampler,
            sampler_ratio: ratio,
            ..Telemetry::default()
        })
    }

    fn parent(flags: &str) -> Context {
        let mut carrier = HashMap::new();
        carrier.insert(
            "traceparent".to_string(),
            format!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{flags}"),
        );
        TraceContextPropagator::new().extract(&carrier)
    }

    #[test]
    fn always_on_makes_no_decision() {
        assert!(sampling(TraceSampler::AlwaysOn, 1.0)
            .decide(&Context::new())
            .is_none());
    }

    #[test]
    fn parent_based_follows_the_agents_flag_and_keeps_its_trace() {
        let s = sampling(TraceSampler::ParentbasedTraceidratio, 0.0);
        let sampled = s.decide(&parent("01")).unwrap();
        assert!(sampled.sampled);
        assert_eq!(
            sampled.trace_id.to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(!s.decide(&parent("00")).unwrap().sampled);
        // No parent: the ratio decides, here 0.
        assert!(!s.decide(&Context::new()).unwrap().sampled);
    }

    #[test]
    fn a_ratio_samples_about_its_share_of_roots() {
        let s = sampling(TraceSampler::ParentbasedTraceidratio, 0.1);
        let sampled = (0..10_000)
            .filter(|_| s.decide(&Context::new()).unwrap().sampled)
            .count();
        assert!((800..1200).contains(&sampled), "{sampled} of 10000");
    }

    #[test]
    fn a_preset_trace_id_is_taken_once() {
        let ids = PresetTraceIds::default();
        let id = TraceId::from(42u128);
        let taken = with_trace_id(id, || ids.new_trace_id());
        assert_eq!(taken, id);
        assert_ne!(ids.new_trace_id(), id);
    }
}
