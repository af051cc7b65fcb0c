//! Leader election on a `coordination.k8s.io/v1` Lease: each round reads the Lease, lets
//! [`Candidate`] decide, and writes it (create, renew, take over) with its
//! `resourceVersion`, so of two replicas racing for it the API server lets exactly one
//! win (`409 Conflict` for the other). Leadership is published on a watch channel; the
//! status writer checks it before every write.
//!
//! A leader that can't renew (API server away, every write conflicting, a request
//! hanging) keeps writing only until the renew deadline, then steps down; it is
//! shorter than the lease, so its successor can't start before it stops. On shutdown a
//! leader releases the Lease (no holder), so a successor takes over at once instead
//! of waiting out the lease.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use std::time::{Duration, Instant};
use tokio::sync::watch;

use super::election::{Candidate, Step};
use super::settings::LeaderElection;

/// What one round found out.
#[derive(Debug)]
enum Round {
    /// We hold the Lease, renewed just now.
    Held,
    /// Someone else holds it.
    NotHeld,
    /// We don't know (an error, a lost race on renewal): leadership stays as it was
    /// until the renew deadline.
    Unknown(String),
}

/// Leadership across rounds.
#[derive(Default)]
struct State {
    /// When we last renewed the Lease we hold; `None` while we don't lead.
    renewed: Option<Instant>,
    /// The last round failed (logged once until one succeeds).
    failing: bool,
}

pub struct Elector {
    api: Api<Lease>,
    name: String,
    settings: LeaderElection,
    candidate: Candidate,
}

impl Elector {
    pub fn new(api: Api<Lease>, settings: LeaderElection) -> Elector {
        let candidate = Candidate::new(settings.identity.clone(), settings.lease_duration());
        Elector {
            api,
            name: settings.lease_name.clone(),
            settings,
            candidate,
        }
    }

    /// Runs rounds every retry period until `stop` turns true, publishing leadership on
    /// `leader`; then releases the Lease if held.
    pub async fn run(mut self, leader: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let mut state = State::default();
        loop {
            // A hanging request must not keep a leader writing past its deadline.
            let limit = match state.renewed {
                Some(at) => self.settings.renew_deadline().saturating_sub(at.elapsed()),
                None => self.settings.renew_deadline(),
            };
            let limit = limit.max(Duration::from_millis(1));
            let round = match tokio::time::timeout(limit, self.round()).await {
                Ok(round) => round,
                Err(_) => Round::Unknown("the API server did not answer in time".into()),
            };
            self.settle(&mut state, round);
            leader.send_if_modified(|current| {
                let now = state.renewed.is_some();
                std::mem::replace(current, now) != now
            });
            tokio::select! {
                () = tokio::time::sleep(self.settings.retry_period()) => {}
                _ = stop.wait_for(|stop| *stop) => break,
            }
        }
        if leader.send_replace(false) {
            self.release().await;
        }
    }

    /// What a round means for leadership, logged once per change (not once per round
    /// while the API server is away).
    fn settle(&self, state: &mut State, round: Round) {
        let lease = &self.name;
        if state.failing && !matches!(round, Round::Unknown(_)) {
            tracing::info!(%lease, "leader election works again");
            state.failing = false;
        }
        match round {
            Round::Held => {
                if state.renewed.is_none() {
                    let identity = &self.settings.identity;
                    tracing::info!(%lease, %identity, "became the leader; writing status");
                }
                state.renewed = Some(Instant::now());
            }
            Round::NotHeld => {
                if state.renewed.take().is_some() {
                    tracing::warn!(%lease, "lost the lease; no longer writing status");
                }
            }
            Round::Unknown(error) => {
                if !std::mem::replace(&mut state.failing, true) {
                    tracing::warn!(%lease, %error, "leader election round failed; retrying");
                }
                let deadline = self.settings.renew_deadline();
                if state.renewed.is_some_and(|at| at.elapsed() >= deadline) {
                    tracing::warn!(%lease, "could not renew within the deadline; no longer writing status");
                    state.renewed = None;
                }
            }
        }
    }

    async fn round(&mut self) -> Round {
        let current = match self.api.get_opt(&self.name).await {
            Ok(current) => current,
            Err(e) => return Round::Unknown(e.to_string()),
        };
        let step = self.candidate.step(current.as_ref(), Instant::now());
        let written = match (step.clone(), current) {
            (Step::Follow { .. }, _) => return Round::NotHeld,
            (Step::Create, _) => self.api.create(&PostParams::default(), &self.fresh()).await,
            (Step::Renew, Some(mut lease)) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                spec.renew_time = Some(MicroTime(Timestamp::now()));
                spec.lease_duration_seconds = Some(self.duration_seconds());
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
            (Step::TakeOver, Some(mut lease)) => {
                let transitions = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.lease_transitions)
                    .unwrap_or(0);
                let mut spec = self.fresh().spec.unwrap_or_default();
                spec.lease_transitions = Some(transitions.saturating_add(1));
                lease.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
            (Step::Renew | Step::TakeOver, None) => {
                return Round::Unknown("the Lease vanished".into())
            }
        };
        match written {
            Ok(_) => Round::Held,
            // Another replica wrote first and won this race: a standby just follows; a
            // leader looks again next round, leading until its deadline.
            Err(kube::Error::Api(status)) if status.code == 409 => match step {
                Step::Renew => Round::Unknown("another replica wrote the Lease first".into()),
                _ => Round::NotHeld,
            },
            Err(e) => Round::Unknown(e.to_string()),
        }
    }

    /// The Lease with us as a fresh holder.
    fn fresh(&self) -> Lease {
        let now = MicroTime(Timestamp::now());
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.settings.identity.clone()),
                lease_duration_seconds: Some(self.duration_seconds()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        }
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.settings.lease_duration_seconds).unwrap_or(i32::MAX)
    }

    /// Gives the Lease up (no holder, a 1 s duration), as client-go's ReleaseOnCancel
    /// does; a failure only means the successor waits out the lease.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.name, "released the lease"),
            Err(e) => {
                tracing::warn!(lease = %self.name, error = %e, "could not release the lease; a successor waits for it to lapse")
            }
        }
    }
}
