//! Events published off the path of whoever tells them: a fence tells one at each step, and each is
//! a request to the API server that the next step need not wait for. Normal Events go through a
//! queue that one task publishes in the order told. A Warning is published at once by whoever tells
//! it, as before the queue: what follows one (the guard's ForceOff after `ReleasedMachinePoweredOn`, a
//! report recorded as published after `FenceDidNotTakeEffect`, docs/safety.md) never waits behind
//! the queue. Publishing stays best effort (a failure is logged); what a fence decides never rests on it.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration as StdDuration,
};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::{Notify, mpsc};
use tracing::warn;

/// How many Normal Events may wait to be published, a storm's worth of steps (50 fences with several
/// notices each); past that, whoever tells one publishes it.
const QUEUE: usize = 512;

/// The Events told and the task that publishes them ([`Self::publish`], started by `controller::run`).
pub struct EventQueue {
    /// Publishes through kube's cache of Events, which folds repeats into a series.
    recorder: Recorder,
    sender: mpsc::Sender<(Event, ObjectReference)>,
    receiver: Mutex<Option<mpsc::Receiver<(Event, ObjectReference)>>>,
    /// Queued and not yet published (or failed).
    unpublished: AtomicUsize,
    published: Notify,
}

impl EventQueue {
    pub fn new(recorder: Recorder) -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE);
        Self {
            recorder,
            sender,
            receiver: Mutex::new(Some(receiver)),
            unpublished: AtomicUsize::new(0),
            published: Notify::new(),
        }
    }

    /// A Warning is published now; a Normal Event is queued, or published now when the queue is full
    /// (a storm on a slow API server) or has no publisher: whoever tells it never waits for others'.
    pub async fn tell(&self, event: Event, regarding: ObjectReference) {
        let room = match event.type_ {
            EventType::Warning => None,
            EventType::Normal => self.sender.try_reserve().ok(),
        };
        match room {
            Some(room) => {
                self.unpublished.fetch_add(1, Ordering::AcqRel);
                room.send((event, regarding));
            }
            None => self.publish_one(&event, &regarding).await,
        }
    }

    async fn publish_one(&self, event: &Event, regarding: &ObjectReference) {
        if let Err(error) = self.recorder.publish(event, regarding).await {
            warn!(%error, reason = %event.reason, "could not publish an Event");
        }
    }

    /// Publishes the queued Events in order. Only the first call publishes; it runs as long as the process.
    pub async fn publish(&self) {
        let taken = self.receiver.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let Some(mut receiver) = taken else { return };
        while let Some((event, regarding)) = receiver.recv().await {
            self.publish_one(&event, &regarding).await;
            if self.unpublished.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.published.notify_waiters();
            }
        }
    }

    /// Waits until every Event queued so far is published, for at most `limit` (at shutdown, so that
    /// the last steps' Events are not lost with the process). `false` when some are still waiting.
    pub async fn flush(&self, limit: StdDuration) -> bool {
        let drained = async {
            loop {
                let published = self.published.notified();
                if self.unpublished.load(Ordering::Acquire) == 0 {
                    return;
                }
                published.await;
            }
        };
        tokio::time::timeout(limit, drained).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::{
        Client,
        client::Body,
        runtime::events::{EventType, Reporter},
    };

    use super::*;

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(format!("{reason} happened")),
            action: "ConfirmingOff".into(),
            secondary: None,
        }
    }

    type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

    /// A queue whose Events go to a mock API server, and its handle.
    fn queue() -> (std::sync::Arc<EventQueue>, Handle) {
        let (mock, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let recorder =
            Recorder::new(Client::new(mock, "default"), Reporter { controller: "coroner".into(), instance: None });
        (std::sync::Arc::new(EventQueue::new(recorder)), handle)
    }

    /// The next Event the API server is sent: its reason, and the answer to give (the Event stored).
    async fn next_event(handle: &mut Handle) -> (String, impl FnOnce()) {
        let (request, respond) = handle.next_request().await.expect("an Event");
        let bytes = request.into_body().collect_bytes().await.expect("body");
        let sent: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        let reason = sent["reason"].as_str().unwrap_or_default().to_owned();
        (reason, move || respond.send_response(Response::builder().body(Body::from(bytes.to_vec())).expect("response")))
    }

    fn regarding() -> ObjectReference {
        ObjectReference {
            kind: Some("CoronerRemediation".into()),
            namespace: Some("coroner-system".into()),
            name: Some("worker-1".into()),
            ..ObjectReference::default()
        }
    }

    #[tokio::test]
    async fn telling_an_event_does_not_wait_for_the_api_server_and_they_are_published_in_the_order_told() {
        let (queue, mut handle) = queue();
        // Told while nothing answers: neither waits for the API server.
        queue.tell(event("ForceOffSent"), regarding()).await;
        queue.tell(event("PowerOffConfirmed"), regarding()).await;
        let publisher = tokio::spawn({
            let queue = queue.clone();
            async move { queue.publish().await }
        });
        let mut reasons = Vec::new();
        for _ in 0..2 {
            let (reason, answer) = next_event(&mut handle).await;
            reasons.push(reason);
            answer();
        }
        assert_eq!(reasons, ["ForceOffSent", "PowerOffConfirmed"]);
        assert!(queue.flush(StdDuration::from_secs(5)).await, "both published");
        publisher.abort();
    }

    #[tokio::test]
    async fn a_warning_is_published_by_whoever_tells_it_ahead_of_the_queued_events() {
        let (queue, mut handle) = queue();
        // Queued, and no publisher runs yet.
        queue.tell(event("IdentityVerified"), regarding()).await;
        let warning = Event { type_: EventType::Warning, ..event("ReleasedMachinePoweredOn") };
        let told = tokio::spawn({
            let queue = queue.clone();
            async move { queue.tell(warning, regarding()).await }
        });
        let (reason, answer) = next_event(&mut handle).await;
        assert_eq!(reason, "ReleasedMachinePoweredOn");
        assert!(!told.is_finished(), "telling a Warning waits for its publication");
        answer();
        told.await.expect("told once published");
        assert!(!queue.flush(StdDuration::from_millis(10)).await, "the Normal Event still waits for the publisher");
    }

    #[tokio::test]
    async fn a_normal_event_told_when_the_queue_is_full_is_published_by_whoever_tells_it() {
        let (queue, mut handle) = queue();
        // No publisher runs: the queue fills.
        for _ in 0..QUEUE {
            queue.tell(event("ForceOffSent"), regarding()).await;
        }
        let told = tokio::spawn({
            let queue = queue.clone();
            async move { queue.tell(event("PowerOffProven"), regarding()).await }
        });
        let (reason, answer) = next_event(&mut handle).await;
        assert_eq!(reason, "PowerOffProven", "the Event past the queue");
        answer();
        told.await.expect("told once published");
    }

    #[tokio::test]
    async fn a_flush_gives_up_after_its_limit_when_the_api_server_does_not_answer() {
        let (queue, _handle) = queue();
        queue.tell(event("ForceOffSent"), regarding()).await;
        let publisher = tokio::spawn({
            let queue = queue.clone();
            async move { queue.publish().await }
        });
        assert!(!queue.flush(StdDuration::from_millis(50)).await, "the Event is still unpublished");
        publisher.abort();
    }
}
