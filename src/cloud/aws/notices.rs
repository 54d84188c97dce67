//! Interruption notices: an SQS consumer for the EventBridge events EC2 and
//! AWS Health send (spot interruption warnings, rebalance recommendations,
//! state changes, scheduled changes), turned into [`InstanceNotice`]s for the
//! controller. The queue and its rules are `deploy/aws/interruption-queue.yaml`;
//! parsing is the pure [`parse`] module. Mapping instance IDs to NodeClaims is
//! the controller's job, not this module's.
//!
//! A message is deleted only once the controller has made every notice in
//! it durable (for a spot interruption: the claim's `Interrupted` condition
//! and the node's disrupted taint are written) or found it is about an
//! instance that is not ours: the controller reports each notice through
//! [`NoticeAcks`], and the consumer settles its messages from those reports
//! before and after every receive. A crash, a failover or a lost lease
//! before that leaves the message on the queue: SQS delivers it again after
//! its visibility timeout. A notice the controller cannot act on yet (its
//! claim is not known yet) is made visible again after
//! [`ConsumerConfig::retry_after`].
//!
//! Malformed and unknown messages are logged, counted
//! (`notice_messages{outcome}`) and deleted at once: they would never parse
//! on a second try. A message whose event was settled recently is deleted
//! without acting again (see [`RecentIds`]); one delivered again while its
//! notices are still with the controller only refreshes the receipt handle.

pub mod parse;

use crate::cloud::{InstanceNotice, NoticeAck, NoticeAcks, NoticeOutcome};
use crate::metrics::{MessageLabels, Metrics};
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::Message;
use parse::{parse_message, Parsed};
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What can go wrong while consuming the queue.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `ReceiveMessage` failed (network, permissions, no such queue).
    /// Retryable: [`run_consumer`] waits and receives again.
    #[error("cannot receive from {queue}: {message}")]
    Receive {
        /// The queue URL.
        queue: String,
        /// The SDK's error, with its context.
        message: String,
    },
    /// The receiver of the notices is gone; the consumer stops. Not
    /// retryable. The message in hand is not deleted, so it is redelivered.
    #[error("the notice channel is closed")]
    ChannelClosed,
    /// `GetQueueUrl` of a queue given by name failed (no such queue, no
    /// permission). Not retried: the controller stops at startup.
    #[error("cannot find the SQS queue named {queue}: {message}")]
    QueueUrl {
        /// The queue's name.
        queue: String,
        /// The SDK's error, with its context.
        message: String,
    },
}

/// The module's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the consumer polls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// The queue URL (the template's `QueueURL` output).
    pub queue_url: String,
    /// Long-poll wait of one receive, 0..=20 s (SQS's limit; longer is
    /// clamped). Short in tests.
    pub wait_time: Duration,
    /// Messages per receive, 1..=10 (clamped).
    pub max_messages: i32,
    /// How many recent event IDs are remembered for de-duplication.
    pub remembered_ids: usize,
    /// Pause after a failed receive before the next one.
    pub error_backoff: Duration,
    /// How soon a notice the controller could not act on yet is delivered
    /// again (its visibility timeout is set to this).
    pub retry_after: Duration,
}

impl ConsumerConfig {
    /// Defaults for production: 20 s long polls of up to 10 messages,
    /// 10 000 remembered IDs, 5 s back-off after an error.
    pub fn new(queue_url: impl Into<String>) -> ConsumerConfig {
        ConsumerConfig {
            queue_url: queue_url.into(),
            wait_time: Duration::from_secs(20),
            max_messages: 10,
            remembered_ids: 10_000,
            error_backoff: Duration::from_secs(5),
            retry_after: Duration::from_secs(10),
        }
    }
}

/// The URL of the queue `queue` names: a URL as it is, a name (what
/// Karpenter's `settings.interruptionQueue` holds) looked up with
/// `GetQueueUrl` in the client's region and account.
///
/// # Errors
/// [`Error::QueueUrl`] when the lookup fails.
pub async fn queue_url(sqs: &aws_sdk_sqs::Client, queue: &str) -> Result<String> {
    if queue.starts_with("https://") || queue.starts_with("http://") {
        return Ok(queue.to_string());
    }
    let out = sqs
        .get_queue_url()
        .queue_name(queue)
        .send()
        .await
        .map_err(|e| Error::QueueUrl {
            queue: queue.to_string(),
            message: DisplayErrorContext(&e).to_string(),
        })?;
    out.queue_url.ok_or_else(|| Error::QueueUrl {
        queue: queue.to_string(),
        message: "the answer has no URL".into(),
    })
}

/// A bounded memory of recently handled event IDs: the oldest is forgotten
/// when a new one would exceed the capacity. SQS redelivers within the
/// visibility timeout and the queue keeps messages 5 minutes, so a few
/// thousand IDs cover every realistic duplicate.
#[derive(Debug, Clone)]
pub struct RecentIds {
    capacity: usize,
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl RecentIds {
    /// An empty memory of at most `capacity` IDs (at least one).
    pub fn new(capacity: usize) -> RecentIds {
        RecentIds {
            capacity: capacity.max(1),
            order: VecDeque::new(),
            set: HashSet::new(),
        }
    }

    /// Whether `id` was remembered.
    pub fn contains(&self, id: &str) -> bool {
        self.set.contains(id)
    }

    /// Remembers `id`, forgetting the oldest ID when full.
    pub fn insert(&mut self, id: &str) {
        if !self.set.insert(id.to_string()) {
            return;
        }
        self.order.push_back(id.to_string());
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    /// How many IDs are remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// What one poll did, message by message outcome (the same outcomes as the
/// `notice_messages` metric).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollSummary {
    /// Messages whose notices were handed to the controller.
    pub accepted: usize,
    /// Messages whose event was settled before (deleted), or that are with
    /// the controller already (kept).
    pub duplicate: usize,
    /// Messages that are not a well-formed event we know.
    pub malformed: usize,
    /// Well-formed events of a kind we do not act on.
    pub unknown: usize,
    /// Notices sent.
    pub notices: usize,
}

impl PollSummary {
    /// Messages received in the poll.
    pub fn messages(&self) -> usize {
        self.accepted + self.duplicate + self.malformed + self.unknown
    }
}

/// What settling the controller's reports did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SettleSummary {
    /// Messages deleted because their notices were acted on and recorded.
    pub recorded: usize,
    /// Messages deleted because every notice in them was about an instance
    /// that is not ours.
    pub foreign: usize,
    /// Messages left on the queue to be delivered again.
    pub retried: usize,
}

/// A message whose notices are with the controller.
#[derive(Debug)]
struct InFlight {
    /// The SQS message ID (a copy sent twice has another).
    message_id: Option<String>,
    /// The latest receipt handle (a redelivery gets a new one).
    receipt: Option<String>,
    /// Instances whose notice is not settled yet.
    waiting: HashSet<String>,
    /// Whether any settled notice was ours.
    ours: bool,
}

/// The consumer of one queue: the SQS client, its settings, the messages
/// whose notices are with the controller and the memory of settled event
/// IDs.
#[derive(Debug)]
pub struct NoticeConsumer {
    sqs: aws_sdk_sqs::Client,
    config: ConsumerConfig,
    seen: RecentIds,
    acks: NoticeAcks,
    in_flight: HashMap<String, InFlight>,
}

impl NoticeConsumer {
    /// A consumer of `config.queue_url` through `sqs`, settling its messages
    /// from the controller's reports in `acks`.
    pub fn new(
        sqs: aws_sdk_sqs::Client,
        config: ConsumerConfig,
        acks: NoticeAcks,
    ) -> NoticeConsumer {
        let seen = RecentIds::new(config.remembered_ids);
        NoticeConsumer {
            sqs,
            config,
            seen,
            acks,
            in_flight: HashMap::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Messages whose notices are with the controller, not yet settled.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Settles what the controller reported, then one long-poll receive,
    /// then every message handled: notices sent on `notices` (the message
    /// kept until they are settled), malformed, unknown and duplicate
    /// messages deleted, each outcome counted in `metrics`.
    ///
    /// # Errors
    /// [`Error::Receive`] when the receive fails (nothing was handled);
    /// [`Error::ChannelClosed`] when `notices` is closed (the message in hand
    /// is left on the queue).
    pub async fn poll_once(
        &mut self,
        notices: &mpsc::Sender<InstanceNotice>,
        metrics: &Metrics,
    ) -> Result<PollSummary> {
        self.settle(metrics).await;
        let messages = self.receive().await?;
        self.handle(messages, notices, metrics).await
    }

    /// Receives up to `max_messages`, waiting up to `wait_time`.
    async fn receive(&self) -> Result<Vec<Message>> {
        let wait = self.config.wait_time.as_secs().min(20) as i32;
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.config.queue_url)
            .max_number_of_messages(self.config.max_messages.clamp(1, 10))
            .wait_time_seconds(wait)
            .send()
            .await
            .map_err(|e| Error::Receive {
                queue: self.config.queue_url.clone(),
                message: DisplayErrorContext(&e).to_string(),
            })?;
        Ok(out.messages.unwrap_or_default())
    }

    /// Applies the controller's reports: a message all of whose notices are
    /// recorded or foreign is deleted and its event remembered; one with a
    /// notice to retry is made visible again after `retry_after` and
    /// forgotten, so that its next delivery is sent again.
    pub async fn settle(&mut self, metrics: &Metrics) -> SettleSummary {
        let mut summary = SettleSummary::default();
        for NoticeAck {
            id,
            instance_id,
            outcome,
        } in self.acks.take()
        {
            let Some(flight) = self.in_flight.get_mut(&id) else {
                continue;
            };
            match outcome {
                NoticeOutcome::Retry => {
                    let flight = self.in_flight.remove(&id).expect("present");
                    tracing::info!(event_id = %id, %instance_id, "notice not acted on yet; it will be delivered again");
                    self.retry(flight.receipt.as_deref()).await;
                    summary.retried += 1;
                    count(metrics, "retried");
                }
                NoticeOutcome::Recorded | NoticeOutcome::Foreign => {
                    flight.ours |= outcome == NoticeOutcome::Recorded;
                    flight.waiting.remove(&instance_id);
                    if !flight.waiting.is_empty() {
                        continue;
                    }
                    let flight = self.in_flight.remove(&id).expect("present");
                    self.seen.insert(&id);
                    self.delete(flight.receipt.as_deref(), &id).await;
                    if flight.ours {
                        summary.recorded += 1;
                        count(metrics, "recorded");
                    } else {
                        tracing::debug!(event_id = %id, "notice about an instance that is not ours; deleted");
                        summary.foreign += 1;
                        count(metrics, "foreign");
                    }
                }
            }
        }
        summary
    }

    /// Handles received messages one by one (see the module doc).
    async fn handle(
        &mut self,
        messages: Vec<Message>,
        notices: &mpsc::Sender<InstanceNotice>,
        metrics: &Metrics,
    ) -> Result<PollSummary> {
        let mut summary = PollSummary::default();
        for message in messages {
            let receipt = message.receipt_handle.clone();
            let outcome = match message.body.as_deref().map(parse_message) {
                None => {
                    tracing::warn!(message_id = ?message.message_id, "notice message without a body; deleting it");
                    summary.malformed += 1;
                    "malformed"
                }
                Some(Err(e)) => {
                    tracing::warn!(message_id = ?message.message_id, error = %e, "malformed notice message; deleting it");
                    summary.malformed += 1;
                    "malformed"
                }
                Some(Ok(Parsed::Unknown { event_id, what })) => {
                    tracing::warn!(%event_id, %what, "notice of a kind we do not act on; deleting it");
                    summary.unknown += 1;
                    "unknown"
                }
                Some(Ok(Parsed::Notices { event_id, .. })) if self.seen.contains(&event_id) => {
                    tracing::debug!(%event_id, "duplicate notice; deleting it");
                    summary.duplicate += 1;
                    "duplicate"
                }
                Some(Ok(Parsed::Notices { event_id, .. }))
                    if self.in_flight.contains_key(&event_id) =>
                {
                    summary.duplicate += 1;
                    let flight = self.in_flight.get_mut(&event_id).expect("present");
                    if flight.message_id.is_some() && flight.message_id == message.message_id {
                        // Delivered again while the controller still has
                        // it: only the newest receipt handle deletes it.
                        tracing::debug!(%event_id, "notice delivered again while being handled");
                        flight.receipt = receipt;
                        count(metrics, "duplicate");
                        continue;
                    }
                    // Another copy of an event being handled: the first
                    // copy stands for it.
                    tracing::debug!(%event_id, "second copy of a notice being handled; deleting it");
                    "duplicate"
                }
                Some(Ok(Parsed::Notices {
                    event_id,
                    notices: parsed,
                })) => {
                    let waiting: HashSet<String> =
                        parsed.iter().map(|n| n.instance_id.clone()).collect();
                    self.in_flight.insert(
                        event_id.clone(),
                        InFlight {
                            message_id: message.message_id.clone(),
                            receipt,
                            waiting,
                            ours: false,
                        },
                    );
                    for notice in parsed {
                        tracing::info!(%event_id, instance_id = %notice.instance_id, kind = ?notice.kind, "instance notice");
                        notices
                            .send(notice)
                            .await
                            .map_err(|_| Error::ChannelClosed)?;
                        summary.notices += 1;
                    }
                    summary.accepted += 1;
                    count(metrics, "accepted");
                    continue;
                }
            };
            count(metrics, outcome);
            self.delete(receipt.as_deref(), message.message_id().unwrap_or("?"))
                .await;
        }
        Ok(summary)
    }

    /// Deletes a settled message. A failed delete is logged, not returned:
    /// the message comes back after its visibility timeout and is then a
    /// duplicate (or malformed again) and deleted.
    async fn delete(&self, receipt: Option<&str>, what: &str) {
        let Some(handle) = receipt else {
            tracing::warn!(message = %what, "message without a receipt handle cannot be deleted");
            return;
        };
        if let Err(e) = self
            .sqs
            .delete_message()
            .queue_url(&self.config.queue_url)
            .receipt_handle(handle)
            .send()
            .await
        {
            tracing::warn!(message = %what, error = %DisplayErrorContext(&e), "cannot delete a handled notice message; it will be redelivered");
        }
    }

    /// Makes a message visible again after `retry_after` (best-effort: if
    /// this fails, its visibility timeout brings it back anyway).
    async fn retry(&self, receipt: Option<&str>) {
        let Some(handle) = receipt else { return };
        let after = self.config.retry_after.as_secs().min(43_200) as i32;
        if let Err(e) = self
            .sqs
            .change_message_visibility()
            .queue_url(&self.config.queue_url)
            .receipt_handle(handle)
            .visibility_timeout(after)
            .send()
            .await
        {
            tracing::debug!(error = %DisplayErrorContext(&e), "cannot shorten a notice's visibility timeout");
        }
    }
}

fn count(metrics: &Metrics, outcome: &str) {
    metrics
        .notice_messages
        .get_or_create(&MessageLabels {
            outcome: outcome.to_string(),
        })
        .inc();
}

/// Polls until `cancel` fires: receives (cancellable while waiting), handles
/// what arrived (not cancelled half-way, so a handled message is deleted),
/// and after a failed receive waits [`ConsumerConfig::error_backoff`].
///
/// # Errors
/// [`Error::ChannelClosed`] when the notice receiver is gone; receive
/// failures are logged and retried, never returned.
pub async fn run_consumer(
    mut consumer: NoticeConsumer,
    notices: mpsc::Sender<InstanceNotice>,
    metrics: &Metrics,
    cancel: CancellationToken,
) -> Result<()> {
    loop {
        consumer.settle(metrics).await;
        let received = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            r = consumer.receive() => r,
        };
        match received {
            Ok(messages) => {
                consumer.handle(messages, &notices, metrics).await?;
                consumer.settle(metrics).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "notice queue receive failed; retrying");
                tokio::select! {
                    () = cancel.cancelled() => return Ok(()),
                    () = tokio::time::sleep(consumer.config.error_backoff) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_ids_forget_the_oldest_beyond_capacity() {
        let mut ids = RecentIds::new(2);
        ids.insert("a");
        ids.insert("b");
        ids.insert("a");
        assert_eq!(ids.len(), 2);
        ids.insert("c");
        assert!(!ids.contains("a"));
        assert!(ids.contains("b") && ids.contains("c"));
        assert_eq!(ids.len(), 2);
    }
}
