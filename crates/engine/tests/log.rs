#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The event log's fan-out: no gap, no duplicate, bounded memory for slow readers.

use std::sync::Arc;
use std::time::Duration;

use switchboard_engine::{EventLog, SubItem, Subscription};
use switchboard_protocol::AgentEvent;
use switchboard_store::{SessionRecord, SqlStore, Store};
use uuid::Uuid;

async fn setup(live_buffer: usize) -> (tempfile::TempDir, Arc<SqlStore>, EventLog, Uuid) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqlStore::open_path(&dir.path().join("db")).await.unwrap());
    let id = Uuid::now_v7();
    store
        .create_session(&SessionRecord {
            id,
            title: "t".into(),
            cwd: "/".into(),
            config: serde_json::json!({}),
            created_at: "2026-01-01T00:00:00Z".into(),
            updated_at: "2026-01-01T00:00:00Z".into(),
            last_seq: 0,
            archived_at: None,
            owner: None,
        })
        .await
        .unwrap();
    let log = EventLog::new(store.clone(), live_buffer);
    (dir, store, log, id)
}

fn delta(i: usize) -> AgentEvent {
    AgentEvent::TextDelta {
        run_id: Uuid::nil(),
        delta: format!("d{i}"),
    }
}

async fn collect(mut sub: Subscription, until: u64) -> Vec<u64> {
    let mut seqs = Vec::new();
    while seqs.last().copied().unwrap_or(0) < until {
        match tokio::time::timeout(Duration::from_secs(20), sub.next())
            .await
            .expect("stalled")
            .unwrap()
        {
            Some(SubItem::Events(batch)) => seqs.extend(batch.iter().map(|e| e.seq)),
            Some(SubItem::Gap(g)) => panic!("unexpected gap {g:?}"),
            None => break,
        }
    }
    seqs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_joining_at_any_point_see_each_seq_once() {
    let (_dir, _store, log, id) = setup(64).await;
    const N: u64 = 3000;
    let appender = {
        let log = log.clone();
        tokio::spawn(async move {
            for i in 0..N as usize {
                log.append(id, &delta(i)).await.unwrap();
                if i % 500 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    let mut readers = Vec::new();
    for after in [0u64, 0, 10, 100, 1000] {
        let sub = log.subscribe(id, after).await.unwrap();
        readers.push((after, tokio::spawn(collect(sub, N))));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    appender.await.unwrap();
    for (after, r) in readers {
        let got = r.await.unwrap();
        let want: Vec<u64> = (after + 1..=N).collect();
        assert_eq!(got, want, "subscriber from {after}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_falls_back_to_the_log_and_catches_up() {
    let (_dir, _store, log, id) = setup(16).await;
    let mut sub = log.subscribe(id, 0).await.unwrap();
    // The subscriber reads nothing while 5,000 events go by a 16-slot live channel.
    const N: u64 = 5000;
    let events: Vec<_> = (0..N as usize).map(delta).collect();
    for chunk in events.chunks(100) {
        log.append_many(id, chunk).await.unwrap();
    }
    let mut seqs = Vec::new();
    while seqs.len() < N as usize {
        match sub.next().await.unwrap() {
            Some(SubItem::Events(b)) => seqs.extend(b.iter().map(|e| e.seq)),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seqs, (1..=N).collect::<Vec<_>>());
}

#[tokio::test]
async fn seq_continues_after_reopen_and_is_never_reused() {
    let (dir, store, log, id) = setup(64).await;
    log.append_many(id, &[delta(1), delta(2), delta(3)])
        .await
        .unwrap();
    drop(log);
    let log2 = EventLog::new(store.clone(), 64);
    assert_eq!(log2.append(id, &delta(4)).await.unwrap(), 4);
    // Even when every stored event was pruned, seq keeps counting.
    store
        .prune_events_before("9999-01-01T00:00:00Z")
        .await
        .unwrap();
    let log3 = EventLog::new(store.clone(), 64);
    assert_eq!(log3.append(id, &delta(5)).await.unwrap(), 5);
    drop(dir);
}

#[tokio::test]
async fn asking_for_pruned_events_reports_a_gap_first() {
    let (_dir, store, log, id) = setup(64).await;
    log.append_many(id, &[delta(1), delta(2)]).await.unwrap();
    store
        .prune_events_before("9999-01-01T00:00:00Z")
        .await
        .unwrap();
    log.append_many(id, &[delta(3), delta(4)]).await.unwrap();
    let mut sub = log.subscribe(id, 0).await.unwrap();
    match sub.next().await.unwrap() {
        Some(SubItem::Gap(g)) => {
            assert_eq!(
                (
                    g.requested_after_id,
                    g.oldest_available_id,
                    g.newest_available_id
                ),
                (0, 3, 4)
            );
        }
        other => panic!("expected a gap, got {other:?}"),
    }
    match sub.next().await.unwrap() {
        Some(SubItem::Events(b)) => {
            assert_eq!(b.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3, 4])
        }
        other => panic!("expected events, got {other:?}"),
    }
    // Resuming from inside the retained window: no gap.
    let mut sub = log.subscribe(id, 3).await.unwrap();
    assert!(matches!(
        sub.next().await.unwrap(),
        Some(SubItem::Events(_))
    ));
}

#[tokio::test]
async fn a_committed_batch_is_encoded_once_for_all_live_subscribers() {
    let (_dir, _store, log, id) = setup(64).await;
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut waiters = Vec::new();
    for _ in 0..5 {
        let mut sub = log.subscribe(id, 0).await.unwrap();
        let calls = calls.clone();
        waiters.push(tokio::spawn(async move {
            match sub.next().await.unwrap() {
                Some(SubItem::Events(b)) => b
                    .encode_parts(|evs| {
                        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let seqs: Vec<String> = evs.iter().map(|e| e.seq.to_string()).collect();
                        bytes::Bytes::from(seqs.join(","))
                    })
                    .concat(),
                other => panic!("expected events, got {other:?}"),
            }
        }));
    }
    // Let every subscriber finish its (empty) replay and wait on the live channel.
    tokio::time::sleep(Duration::from_millis(100)).await;
    log.append_many(id, &[delta(1), delta(2), delta(3)])
        .await
        .unwrap();
    for w in waiters {
        assert_eq!(&w.await.unwrap()[..], b"1,2,3");
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_subscriber_resuming_inside_a_live_batch_gets_only_the_rest() {
    let (_dir, _store, log, id) = setup(64).await;
    log.append_many(id, &[delta(1), delta(2)]).await.unwrap();
    // Resuming after seq 4 before 3..=5 exist: once the (empty) replay is done and the
    // subscriber waits live, the batch 3..=5 commits and must be cut at the seam.
    let mut cut = log.subscribe(id, 4).await.unwrap();
    let encode = |evs: &[switchboard_engine::LogEvent]| {
        let seqs: Vec<String> = evs.iter().map(|e| e.seq.to_string()).collect();
        bytes::Bytes::from(seqs.join(","))
    };
    let waiter = tokio::spawn(async move {
        match cut.next().await.unwrap() {
            Some(SubItem::Events(b)) => (
                b.iter().map(|e| e.seq).collect::<Vec<_>>(),
                b.encode_parts(encode).concat(),
            ),
            other => panic!("expected events, got {other:?}"),
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    log.append_many(id, &[delta(3), delta(4), delta(5)])
        .await
        .unwrap();
    let (seqs, encoded) = waiter.await.unwrap();
    assert_eq!(seqs, vec![5]);
    assert_eq!(&encoded[..], b"5");
}

/// Two event logs over one database (two instances of the server): their appends to one
/// session collide on seqs, and each collision is resolved by reloading the last seq, so
/// every event is stored once, seqs are 1..=N without a gap, and each writer's events keep
/// their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_on_one_database_never_reuse_a_seq() {
    let (dir, store, log_a, id) = setup(64).await;
    let other = Arc::new(SqlStore::open_path(&dir.path().join("db")).await.unwrap());
    let log_b = EventLog::new(other.clone(), 64);
    const N: usize = 150;
    let write = |log: EventLog, tag: &'static str| {
        tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..N {
                let ev = AgentEvent::TextDelta {
                    run_id: Uuid::nil(),
                    delta: format!("{tag}{i}"),
                };
                seqs.push(log.append(id, &ev).await.unwrap());
            }
            seqs
        })
    };
    let (a, b) = tokio::join!(write(log_a.clone(), "a"), write(log_b.clone(), "b"));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(
        a.windows(2).all(|p| p[0] < p[1]),
        "writer a's seqs increase"
    );
    assert!(
        b.windows(2).all(|p| p[0] < p[1]),
        "writer b's seqs increase"
    );
    let stored = store.read_events(id, 0, 10_000).await.unwrap();
    let seqs: Vec<u64> = stored.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=(2 * N) as u64).collect::<Vec<_>>(),
        "no gap, no repeat"
    );
    let mut all: Vec<u64> = a.iter().chain(b.iter()).copied().collect();
    all.sort();
    assert_eq!(all, seqs, "every append got the seq it was stored with");
    // Each writer's own events are stored in the order it wrote them.
    for tag in ["a", "b"] {
        let mine: Vec<usize> = stored
            .iter()
            .filter_map(|e| {
                let v: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
                let d = v["TextDelta"]["delta"].as_str()?.to_string();
                d.strip_prefix(tag).map(|n| n.parse().unwrap())
            })
            .collect();
        assert_eq!(mine, (0..N).collect::<Vec<_>>(), "{tag}'s order");
    }
    assert_eq!(
        other.event_bounds(id).await.unwrap().last_seq,
        (2 * N) as u64
    );
}

/// A bus between two event logs in one test process; drops every `drop_every`-th batch.
struct TestBus {
    peer: std::sync::Mutex<Option<EventLog>>,
    drop_every: usize,
    n: std::sync::atomic::AtomicUsize,
}

impl switchboard_engine::EventBus for TestBus {
    fn publish(&self, session_id: Uuid, events: &[switchboard_engine::LogEvent]) {
        let n = self.n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.drop_every > 0 && n.is_multiple_of(self.drop_every) {
            return; // lost on the way
        }
        if let Some(peer) = self.peer.lock().unwrap().as_ref() {
            peer.inject(session_id, events.to_vec());
        }
    }
    fn kind(&self) -> &'static str {
        "test"
    }
    fn connected(&self) -> bool {
        true
    }
    fn control<'a>(
        &'a self,
        _instance: &'a str,
        _request: switchboard_engine::RunControl,
    ) -> futures::future::BoxFuture<'a, Result<switchboard_engine::ControlReply, String>> {
        Box::pin(async { Err("this test bus carries no control requests".to_string()) })
    }
}

/// Events appended through one instance reach a subscriber on another through the bus, in
/// order and once each — also when the bus loses batches (the subscriber reads the store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_on_another_instance_sees_every_event_once() {
    for drop_every in [0, 2] {
        let (dir, _store, log_a, id) = setup(64).await;
        let other = Arc::new(SqlStore::open_path(&dir.path().join("db")).await.unwrap());
        let log_b = EventLog::new(other, 64);
        let bus = Arc::new(TestBus {
            peer: std::sync::Mutex::new(Some(log_b.clone())),
            drop_every,
            n: Default::default(),
        });
        log_a.attach_bus(bus.clone());
        log_b.attach_bus(Arc::new(TestBus {
            peer: std::sync::Mutex::new(None),
            drop_every: 0,
            n: Default::default(),
        }));
        let sub = log_b.subscribe(id, 0).await.unwrap();
        let reader = tokio::spawn(collect(sub, 200));
        for i in 0..200 {
            log_a.append(id, &delta(i)).await.unwrap();
            if i % 20 == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let seqs = tokio::time::timeout(Duration::from_secs(20), reader)
            .await
            .expect("the subscriber on B caught up")
            .unwrap();
        assert_eq!(
            seqs,
            (1..=200).collect::<Vec<u64>>(),
            "drop_every {drop_every}"
        );
    }
}

/// The log over a store that can be slowed down or broken.
async fn faulty_setup() -> (
    tempfile::TempDir,
    Arc<SqlStore>,
    switchboard_test_support::faulty_store::FaultyStore,
    EventLog,
    Uuid,
) {
    let (dir, store, _, id) = setup(64).await;
    let faulty = switchboard_test_support::faulty_store::FaultyStore::new(store.clone());
    let log = EventLog::new(Arc::new(faulty.clone()), 64);
    (dir, store, faulty, log, id)
}

fn delta_text(e: &switchboard_engine::LogEvent) -> String {
    let v: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
    v["TextDelta"]["delta"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Pipelined deltas are queued without waiting for their commit, yet every event a
/// subscriber receives was committed before it was published (the store reports each
/// commit to the test before the writer hears of it), seqs stay contiguous, and the text
/// arrives whole and in order even where deltas were merged into one event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_never_sees_an_uncommitted_pipelined_event() {
    use switchboard_test_support::faulty_store::{Action, Fault};
    let (_dir, store, faulty, log, id) = faulty_setup().await;
    let committed = Arc::new(std::sync::Mutex::new(
        std::collections::HashSet::<u64>::new(),
    ));
    {
        let committed = committed.clone();
        faulty.observe_commits(move |evs| {
            committed.lock().unwrap().extend(evs.iter().map(|e| e.seq));
        });
    }
    // Slow commits: many deltas pile up behind each one.
    faulty.set(
        "write_events",
        Fault::always(Action::Delay(Duration::from_millis(3))),
    );
    let mut sub = log.subscribe(id, 0).await.unwrap();
    let reader = {
        let committed = committed.clone();
        let store = store.clone();
        tokio::spawn(async move {
            let mut text = String::new();
            let mut seqs = Vec::new();
            loop {
                let item = tokio::time::timeout(Duration::from_secs(20), sub.next())
                    .await
                    .expect("stalled")
                    .unwrap();
                let Some(SubItem::Events(batch)) = item else {
                    panic!("unexpected {item:?}");
                };
                for e in batch.iter() {
                    assert!(
                        committed.lock().unwrap().contains(&e.seq),
                        "seq {} was published before its commit",
                        e.seq
                    );
                    seqs.push(e.seq);
                    if e.kind == "text_complete" {
                        // And the store holds it (another connection reads it back).
                        let back = store.read_events(id, e.seq - 1, 1).await.unwrap();
                        assert_eq!(back[0].seq, e.seq);
                        return (text, seqs);
                    }
                    text.push_str(&delta_text(e));
                }
            }
        })
    };
    let run_id = Uuid::nil();
    let pipe = log.pipeline(id, None);
    let mut sent = String::new();
    const K: usize = 2000;
    for i in 0..K {
        let piece = format!("chunk{i:05} ");
        sent.push_str(&piece);
        pipe.send(run_id, false, piece).await.unwrap();
    }
    pipe.flush().await.unwrap();
    log.append(
        id,
        &AgentEvent::TextComplete {
            run_id,
            text: sent.clone(),
        },
    )
    .await
    .unwrap();
    let (seen, seqs) = reader.await.unwrap();
    assert_eq!(seen, sent, "the subscriber's text is the text sent");
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let stored = store.read_events(id, 0, 100_000).await.unwrap();
    let stored_text: String = stored
        .iter()
        .filter(|e| e.kind == "text_delta")
        .map(delta_text)
        .collect();
    assert_eq!(stored_text, sent, "the stored text is the text sent");
    assert!(
        stored.len() < K / 4,
        "deltas that share a commit are stored as one event: {} events for {K} deltas",
        stored.len()
    );
    assert!(
        faulty.calls("write_events") < (K / 4) as u64,
        "commits carry many deltas each: {} commits",
        faulty.calls("write_events")
    );
}

/// A pipelined write that fails is reported to the pipeline's next call, and nothing the
/// pipeline sent after it is written: the log holds a prefix of the stream, with contiguous
/// seqs, and takes appends again once the store recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pipelined_write_stops_its_pipeline_and_is_reported() {
    use switchboard_test_support::faulty_store::{Action, Fault};
    let (_dir, store, faulty, log, id) = faulty_setup().await;
    let pipe = log.pipeline(id, None);
    let run_id = Uuid::nil();
    for i in 0..10 {
        pipe.send(run_id, false, format!("a{i} ")).await.unwrap();
    }
    pipe.flush().await.unwrap();
    faulty.set("write_events", Fault::always(Action::Fail));
    for i in 0..10 {
        // Queued: the failure is not known yet, or already (then the send says so).
        if pipe.send(run_id, false, format!("b{i} ")).await.is_err() {
            break;
        }
    }
    let err = pipe.flush().await.unwrap_err();
    assert!(err.to_string().contains("injected fault"), "{err}");
    faulty.heal();
    assert!(pipe.send(run_id, false, "c ".into()).await.is_err());
    assert!(
        pipe.flush().await.is_err(),
        "a failed pipeline stays failed"
    );
    // Another pipeline, and plain appends, work again.
    let seq = log
        .append(
            id,
            &AgentEvent::TextDelta {
                run_id,
                delta: "after".into(),
            },
        )
        .await
        .unwrap();
    let fresh = log.pipeline(id, None);
    fresh.send(run_id, false, " more".into()).await.unwrap();
    fresh.flush().await.unwrap();
    let stored = store.read_events(id, 0, 1000).await.unwrap();
    let seqs: Vec<u64> = stored.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=stored.len() as u64).collect::<Vec<_>>(),
        "contiguous"
    );
    assert_eq!(seq, stored[stored.len() - 2].seq);
    let text: String = stored.iter().map(delta_text).collect();
    assert_eq!(
        text, "a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 after more",
        "the stream's prefix, nothing of it after the failure"
    );
}

/// A store slower than the model makes the sender wait once the writer's queue is full:
/// memory stays bounded instead of growing with the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_store_pushes_back_on_the_sender() {
    use switchboard_test_support::faulty_store::{Action, Fault};
    let (_dir, _store, faulty, log, id) = faulty_setup().await;
    faulty.set("write_events", Fault::always(Action::Hang));
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sender = {
        let pipe = log.pipeline(id, None);
        let sent = sent.clone();
        tokio::spawn(async move {
            for i in 0..100_000 {
                pipe.send(Uuid::nil(), false, format!("{i}")).await.unwrap();
                sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let n = sent.load(std::sync::atomic::Ordering::SeqCst);
    assert!(!sender.is_finished(), "the sender waits");
    // The queue (4,096 requests) and the batch stuck in the store (at most 1,024).
    assert!(n <= 4096 + 1024, "{n} deltas queued in memory");
    assert!(n >= 4096, "the queue filled: {n}");
    sender.abort();
}

/// A session's live channel lives as long as its subscribers: the last one to leave drops
/// it (an idle session holds no buffer), one leaving before the others does not, and a
/// subscriber after that gets a new channel that delivers live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_s_channel_goes_with_its_last_subscriber() {
    let (_dir, _store, log, id) = setup(64).await;
    assert_eq!(log.live_sessions(), 0);
    let a = log.subscribe(id, 0).await.unwrap();
    let b = log.subscribe(id, 0).await.unwrap();
    assert_eq!(log.live_sessions(), 1);
    drop(a);
    assert_eq!(log.live_sessions(), 1, "b still follows the session");
    log.append(id, &delta(1)).await.unwrap();
    assert_eq!(collect(b, 1).await, vec![1]);
    assert_eq!(log.live_sessions(), 0, "the last subscriber left");
    // A later subscriber, past what is stored: it can only see seq 2 live.
    let c = log.subscribe(id, 1).await.unwrap();
    assert_eq!(log.live_sessions(), 1);
    let seen = tokio::spawn(collect(c, 2));
    // Its replay finds nothing past seq 1 and it waits on the new channel.
    tokio::time::sleep(Duration::from_millis(300)).await;
    log.append(id, &delta(2)).await.unwrap();
    assert_eq!(seen.await.unwrap(), vec![2]);
    assert_eq!(log.live_sessions(), 0);
}

/// A subscribe that fails reading the log's bounds, or is abandoned while it waits for them
/// (a client gone mid-request), leaves no channel behind; two subscriptions dropped at once
/// from two threads leave none either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_abandoned_or_racing_subscription_leaves_no_channel() {
    use switchboard_test_support::faulty_store::{Action, Fault};
    let (_dir, _store, faulty, log, id) = faulty_setup().await;
    faulty.set("event_bounds", Fault::always(Action::Fail));
    assert!(log.subscribe(id, 0).await.is_err());
    assert_eq!(
        log.live_sessions(),
        0,
        "a failed subscribe kept its channel"
    );
    faulty.set("event_bounds", Fault::always(Action::Hang));
    let abandoned = tokio::time::timeout(Duration::from_millis(100), log.subscribe(id, 0)).await;
    assert!(abandoned.is_err(), "the bounds read was to hang");
    assert_eq!(
        log.live_sessions(),
        0,
        "an abandoned subscribe kept its channel"
    );
    faulty.heal();
    for round in 0..200 {
        let a = log.subscribe(id, 0).await.unwrap();
        let b = log.subscribe(id, 0).await.unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let drops: Vec<_> = [a, b]
            .into_iter()
            .map(|s| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    drop(s);
                })
            })
            .collect();
        for d in drops {
            d.join().unwrap();
        }
        assert_eq!(
            log.live_sessions(),
            0,
            "round {round}: a channel outlived both"
        );
    }
}
