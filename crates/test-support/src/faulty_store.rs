//! A [`Store`] that delegates to a real one and injects faults: the N-th call of a chosen
//! method (or every call from it on) fails with a database error, hangs, or is delayed; an
//! observer sees every successful `write_events` right after the inner store committed it.
//!
//! Faults are set per method name (`"write_events"`, `"append_message"`, … — the trait's
//! method names) and can be changed while the store is in use, so a test can make a store
//! fail and then recover.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_store::people::{
    AuditFilter, AuditRecord, ConsoleSessionRecord, LinkRecord, NewAudit, People, TokenRecord,
    UserRecord,
};
use switchboard_store::{
    ApprovalRecord, EventBounds, FileRecord, Lease, LeaseState, MessageRecord, NewEvent, NewRun,
    RecentMessages, Result, RunFinish, RunOutcome, RunRecord, RunState, SessionRecord,
    SessionUpdate, Store, StoreError, StoredEvent,
};
use uuid::Uuid;

/// What happens to a call a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Fails with [`StoreError::Database`].
    Fail,
    /// Never answers.
    Hang,
    /// Waits this long, then delegates.
    Delay(Duration),
}

/// Which calls of a method a fault applies to (calls are counted from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub action: Action,
    /// First call it applies to.
    pub from: u64,
    /// Applies to this call only, or to every call from it on.
    pub once: bool,
}

impl Fault {
    /// Every call from the `n`-th on.
    pub fn from_call(n: u64, action: Action) -> Self {
        Self {
            action,
            from: n,
            once: false,
        }
    }

    /// The `n`-th call only.
    pub fn nth(n: u64, action: Action) -> Self {
        Self {
            action,
            from: n,
            once: true,
        }
    }

    /// Every call from now on (counting from the next).
    pub fn always(action: Action) -> Self {
        Self::from_call(0, action)
    }
}

type Observer = Arc<dyn Fn(&[NewEvent]) + Send + Sync>;

#[derive(Default)]
struct State {
    calls: HashMap<&'static str, u64>,
    faults: HashMap<&'static str, Fault>,
}

/// The wrapper. Cheap to clone; clones share faults and counters.
#[derive(Clone)]
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    state: Arc<Mutex<State>>,
    observer: Arc<Mutex<Option<Observer>>>,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            state: Arc::default(),
            observer: Arc::default(),
        }
    }

    /// Sets (replaces) the fault of `method`. With `from: 0` it counts from the next call.
    pub fn set(&self, method: &'static str, mut fault: Fault) {
        let mut s = self.state.lock();
        if fault.from == 0 {
            fault.from = s.calls.get(method).copied().unwrap_or(0) + 1;
        }
        s.faults.insert(method, fault);
    }

    /// Removes the fault of `method`: it works again.
    pub fn clear(&self, method: &'static str) {
        let mut s = self.state.lock();
        s.faults.remove(method);
    }

    /// Removes every fault.
    pub fn heal(&self) {
        let mut s = self.state.lock();
        s.faults.clear();
    }

    /// How many times `method` was called.
    pub fn calls(&self, method: &str) -> u64 {
        let s = self.state.lock();
        s.calls.get(method).copied().unwrap_or(0)
    }

    /// Calls `f` with the events of every `write_events` the inner store committed, before
    /// the caller learns it succeeded.
    pub fn observe_commits(&self, f: impl Fn(&[NewEvent]) + Send + Sync + 'static) {
        *self.observer.lock() = Some(Arc::new(f));
    }

    async fn enter(&self, method: &'static str) -> Result<()> {
        let action = {
            let mut s = self.state.lock();
            let n = {
                let c = s.calls.entry(method).or_insert(0);
                *c += 1;
                *c
            };
            s.faults.get(method).and_then(|f| {
                let hit = if f.once { n == f.from } else { n >= f.from };
                hit.then_some(f.action)
            })
        };
        match action {
            None => Ok(()),
            Some(Action::Fail) => Err(StoreError::Database(format!("injected fault in {method}"))),
            Some(Action::Hang) => std::future::pending().await,
            Some(Action::Delay(d)) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
        }
    }
}

#[async_trait]
impl Store for FaultyStore {
    async fn fork_session(
        &self,
        source: Uuid,
        at: u64,
        fork: &SessionRecord,
    ) -> Result<switchboard_store::ForkOutcome> {
        self.enter("fork_session").await?;
        self.inner.fork_session(source, at, fork).await
    }
    async fn create_session(&self, session: &SessionRecord) -> Result<()> {
        self.enter("create_session").await?;
        self.inner.create_session(session).await
    }
    async fn get_session(&self, id: Uuid) -> Result<Option<SessionRecord>> {
        self.enter("get_session").await?;
        self.inner.get_session(id).await
    }
    async fn list_sessions(
        &self,
        limit: u32,
        offset: u32,
        archived: bool,
        visible_to: Option<&str>,
    ) -> Result<(Vec<SessionRecord>, u64)> {
        self.enter("list_sessions").await?;
        self.inner
            .list_sessions(limit, offset, archived, visible_to)
            .await
    }
    async fn update_session(&self, id: Uuid, update: &SessionUpdate) -> Result<bool> {
        self.enter("update_session").await?;
        self.inner.update_session(id, update).await
    }
    async fn delete_session(&self, id: Uuid) -> Result<bool> {
        self.enter("delete_session").await?;
        self.inner.delete_session(id).await
    }
    async fn touch_session(&self, id: Uuid, at: &str) -> Result<()> {
        self.enter("touch_session").await?;
        self.inner.touch_session(id, at).await
    }
    async fn write_events(
        &self,
        events: &[NewEvent],
        fences: &[Lease],
        finishes: &[RunFinish],
    ) -> Result<()> {
        self.enter("write_events").await?;
        self.inner.write_events(events, fences, finishes).await?;
        let observer = self.observer.lock().clone();
        if let Some(f) = observer {
            f(events);
        }
        Ok(())
    }
    async fn read_events(
        &self,
        session_id: Uuid,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        self.enter("read_events").await?;
        self.inner.read_events(session_id, after, limit).await
    }
    async fn event_bounds(&self, session_id: Uuid) -> Result<EventBounds> {
        self.enter("event_bounds").await?;
        self.inner.event_bounds(session_id).await
    }
    async fn prune_events_before(&self, cutoff: &str) -> Result<u64> {
        self.enter("prune_events_before").await?;
        self.inner.prune_events_before(cutoff).await
    }
    async fn enqueue_run(&self, run: &NewRun) -> Result<RunRecord> {
        self.enter("enqueue_run").await?;
        self.inner.enqueue_run(run).await
    }
    async fn enqueue_run_front(&self, run: &NewRun) -> Result<RunRecord> {
        self.enter("enqueue_run_front").await?;
        self.inner.enqueue_run_front(run).await
    }
    async fn run_by_idempotency_key(
        &self,
        session_id: Uuid,
        key: &str,
        since: &str,
    ) -> Result<Option<RunRecord>> {
        self.enter("run_by_idempotency_key").await?;
        self.inner
            .run_by_idempotency_key(session_id, key, since)
            .await
    }
    async fn get_run(&self, id: Uuid) -> Result<Option<RunRecord>> {
        self.enter("get_run").await?;
        self.inner.get_run(id).await
    }

    async fn workspace_instance(&self, session_id: Uuid) -> Result<Option<String>> {
        self.enter("workspace_instance").await?;
        self.inner.workspace_instance(session_id).await
    }
    async fn start_run(
        &self,
        id: Uuid,
        at: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunRecord, Lease)> {
        self.enter("start_run").await?;
        self.inner.start_run(id, at, holder, ttl).await
    }
    async fn finish_run(
        &self,
        id: Uuid,
        outcome: &RunOutcome,
        at: &str,
        fence: Option<&Lease>,
    ) -> Result<()> {
        self.enter("finish_run").await?;
        self.inner.finish_run(id, outcome, at, fence).await
    }
    async fn cancel_queued_run(&self, id: Uuid, at: &str) -> Result<bool> {
        self.enter("cancel_queued_run").await?;
        self.inner.cancel_queued_run(id, at).await
    }
    async fn active_run(&self, session_id: Uuid) -> Result<Option<RunRecord>> {
        self.enter("active_run").await?;
        self.inner.active_run(session_id).await
    }
    async fn next_queued_run(&self, session_id: Uuid) -> Result<Option<RunRecord>> {
        self.enter("next_queued_run").await?;
        self.inner.next_queued_run(session_id).await
    }
    async fn runs_in_state(&self, state: RunState) -> Result<Vec<RunRecord>> {
        self.enter("runs_in_state").await?;
        self.inner.runs_in_state(state).await
    }
    async fn append_message(&self, message: &MessageRecord, fence: Option<&Lease>) -> Result<()> {
        self.enter("append_message").await?;
        self.inner.append_message(message, fence).await
    }
    async fn list_messages(
        &self,
        session_id: Uuid,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<MessageRecord>, u64)> {
        self.enter("list_messages").await?;
        self.inner.list_messages(session_id, limit, offset).await
    }
    async fn recent_messages(
        &self,
        session_id: Uuid,
        max_messages: u32,
        max_chars: u64,
    ) -> Result<RecentMessages> {
        self.enter("recent_messages").await?;
        self.inner
            .recent_messages(session_id, max_messages, max_chars)
            .await
    }
    async fn put_approval(&self, approval: &ApprovalRecord, fence: Option<&Lease>) -> Result<()> {
        self.enter("put_approval").await?;
        self.inner.put_approval(approval, fence).await
    }
    async fn get_approval(&self, session_id: Uuid) -> Result<Option<ApprovalRecord>> {
        self.enter("get_approval").await?;
        self.inner.get_approval(session_id).await
    }
    async fn delete_approval(&self, session_id: Uuid, run_id: Uuid) -> Result<bool> {
        self.enter("delete_approval").await?;
        self.inner.delete_approval(session_id, run_id).await
    }
    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        self.enter("list_approvals").await?;
        self.inner.list_approvals().await
    }
    async fn get_backend_state(&self, session_id: Uuid) -> Result<Option<serde_json::Value>> {
        self.enter("get_backend_state").await?;
        self.inner.get_backend_state(session_id).await
    }
    async fn set_backend_state(
        &self,
        session_id: Uuid,
        state: Option<&serde_json::Value>,
        fence: Option<&Lease>,
    ) -> Result<()> {
        self.enter("set_backend_state").await?;
        self.inner.set_backend_state(session_id, state, fence).await
    }
    async fn put_file(&self, file: &FileRecord) -> Result<()> {
        self.enter("put_file").await?;
        self.inner.put_file(file).await
    }

    async fn get_file(&self, session_id: Uuid, id: Uuid) -> Result<Option<FileRecord>> {
        self.enter("get_file").await?;
        self.inner.get_file(session_id, id).await
    }

    async fn search(
        &self,
        q: &switchboard_store::search::SearchQuery,
    ) -> Result<Vec<switchboard_store::search::SearchHit>> {
        self.enter("search").await?;
        self.inner.search(q).await
    }

    async fn list_files(&self, session_id: Uuid) -> Result<Vec<FileRecord>> {
        self.enter("list_files").await?;
        self.inner.list_files(session_id).await
    }

    async fn content_in_use(&self, sha256: &str) -> Result<bool> {
        self.enter("content_in_use").await?;
        self.inner.content_in_use(sha256).await
    }

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        self.enter("acquire_lease").await?;
        self.inner.acquire_lease(name, holder, ttl).await
    }
    async fn take_over_lease(
        &self,
        expired: &Lease,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        self.enter("take_over_lease").await?;
        self.inner.take_over_lease(expired, holder, ttl).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<bool> {
        self.enter("renew_lease").await?;
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: &Lease) -> Result<bool> {
        self.enter("release_lease").await?;
        self.inner.release_lease(lease).await
    }
    async fn get_lease(&self, name: &str) -> Result<Option<LeaseState>> {
        self.enter("get_lease").await?;
        self.inner.get_lease(name).await
    }
    async fn expired_leases(&self, prefix: &str) -> Result<Vec<Lease>> {
        self.enter("expired_leases").await?;
        self.inner.expired_leases(prefix).await
    }
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    async fn ping(&self) -> Result<()> {
        self.enter("ping").await?;
        self.inner.ping().await
    }
    async fn close(&self) {
        self.inner.close().await
    }
}

#[async_trait]
impl People for FaultyStore {
    async fn set_session_shares(&self, session_id: Uuid, users: &[String]) -> Result<bool> {
        self.enter("set_session_shares").await?;
        self.inner.set_session_shares(session_id, users).await
    }
    async fn session_shares(&self, session_id: Uuid) -> Result<Vec<String>> {
        self.enter("session_shares").await?;
        self.inner.session_shares(session_id).await
    }
    async fn create_user(&self, user: &UserRecord) -> Result<()> {
        self.enter("create_user").await?;
        self.inner.create_user(user).await
    }
    async fn get_user(&self, name: &str) -> Result<Option<UserRecord>> {
        self.enter("get_user").await?;
        self.inner.get_user(name).await
    }
    async fn list_users(&self) -> Result<Vec<UserRecord>> {
        self.enter("list_users").await?;
        self.inner.list_users().await
    }
    async fn update_user(
        &self,
        name: &str,
        role: Option<&str>,
        password_hash: Option<Option<&str>>,
        at: &str,
    ) -> Result<bool> {
        self.enter("update_user").await?;
        self.inner.update_user(name, role, password_hash, at).await
    }
    async fn delete_user(&self, name: &str) -> Result<bool> {
        self.enter("delete_user").await?;
        self.inner.delete_user(name).await
    }
    async fn create_token(&self, token: &TokenRecord) -> Result<()> {
        self.enter("create_token").await?;
        self.inner.create_token(token).await
    }
    async fn token_by_hash(&self, token_hash: &str) -> Result<Option<TokenRecord>> {
        self.enter("token_by_hash").await?;
        self.inner.token_by_hash(token_hash).await
    }
    async fn get_token(&self, id: Uuid) -> Result<Option<TokenRecord>> {
        self.enter("get_token").await?;
        self.inner.get_token(id).await
    }
    async fn list_tokens(&self, user_name: Option<&str>) -> Result<Vec<TokenRecord>> {
        self.enter("list_tokens").await?;
        self.inner.list_tokens(user_name).await
    }
    async fn revoke_token(&self, id: Uuid, at: &str) -> Result<bool> {
        self.enter("revoke_token").await?;
        self.inner.revoke_token(id, at).await
    }
    async fn touch_token(&self, id: Uuid, at: &str) -> Result<()> {
        self.enter("touch_token").await?;
        self.inner.touch_token(id, at).await
    }
    async fn link(&self, link: &LinkRecord) -> Result<()> {
        self.enter("link").await?;
        self.inner.link(link).await
    }
    async fn unlink(&self, platform: &str, identity: &str) -> Result<bool> {
        self.enter("unlink").await?;
        self.inner.unlink(platform, identity).await
    }
    async fn list_links(&self, user_name: Option<&str>) -> Result<Vec<LinkRecord>> {
        self.enter("list_links").await?;
        self.inner.list_links(user_name).await
    }
    async fn linked_user(&self, platform: &str, identity: &str) -> Result<Option<String>> {
        self.enter("linked_user").await?;
        self.inner.linked_user(platform, identity).await
    }
    async fn create_console_session(&self, session: &ConsoleSessionRecord) -> Result<()> {
        self.enter("create_console_session").await?;
        self.inner.create_console_session(session).await
    }
    async fn get_console_session(&self, id_hash: &str) -> Result<Option<ConsoleSessionRecord>> {
        self.enter("get_console_session").await?;
        self.inner.get_console_session(id_hash).await
    }
    async fn delete_console_session(&self, id_hash: &str) -> Result<bool> {
        self.enter("delete_console_session").await?;
        self.inner.delete_console_session(id_hash).await
    }
    async fn delete_console_sessions_of(&self, user_name: &str) -> Result<u64> {
        self.enter("delete_console_sessions_of").await?;
        self.inner.delete_console_sessions_of(user_name).await
    }
    async fn append_audit(&self, entry: &NewAudit) -> Result<i64> {
        self.enter("append_audit").await?;
        self.inner.append_audit(entry).await
    }
    async fn list_audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>> {
        self.enter("list_audit").await?;
        self.inner.list_audit(filter).await
    }
}

#[async_trait]
impl switchboard_store::Metering for FaultyStore {
    async fn reserve_call(
        &self,
        call: &switchboard_store::CallRecord,
        claims: &[switchboard_store::WindowClaim],
    ) -> Result<switchboard_store::Reservation> {
        self.enter("reserve_call").await?;
        self.inner.reserve_call(call, claims).await
    }
    async fn settle_call(
        &self,
        id: Uuid,
        usage: &switchboard_store::CallUsage,
    ) -> Result<Option<Vec<switchboard_store::WindowRecord>>> {
        self.enter("settle_call").await?;
        self.inner.settle_call(id, usage).await
    }
    async fn lose_calls(&self, run_id: Uuid) -> Result<u64> {
        self.enter("lose_calls").await?;
        self.inner.lose_calls(run_id).await
    }
    async fn record_call(
        &self,
        call: &switchboard_store::CallRecord,
        claims: &[switchboard_store::WindowClaim],
    ) -> Result<()> {
        self.enter("record_call").await?;
        self.inner.record_call(call, claims).await
    }
    async fn list_calls(
        &self,
        filter: &switchboard_store::CallFilter,
        limit: u32,
    ) -> Result<Vec<switchboard_store::CallRecord>> {
        self.enter("list_calls").await?;
        self.inner.list_calls(filter, limit).await
    }
    async fn call_totals(
        &self,
        filter: &switchboard_store::CallFilter,
        keys: &[switchboard_store::CallKey],
    ) -> Result<Vec<(Vec<Option<String>>, switchboard_store::CallTotals)>> {
        self.enter("call_totals").await?;
        self.inner.call_totals(filter, keys).await
    }
    async fn unpriced_models(
        &self,
        filter: &switchboard_store::CallFilter,
    ) -> Result<Vec<(String, String)>> {
        self.enter("unpriced_models").await?;
        self.inner.unpriced_models(filter).await
    }
    async fn budget_windows(
        &self,
        budget: &str,
        window: &str,
    ) -> Result<Vec<switchboard_store::WindowRecord>> {
        self.enter("budget_windows").await?;
        self.inner.budget_windows(budget, window).await
    }
    async fn seed_window(&self, window: &switchboard_store::WindowRecord) -> Result<bool> {
        self.enter("seed_window").await?;
        self.inner.seed_window(window).await
    }
    async fn extend_window(
        &self,
        budget: &str,
        subject: &str,
        window: &str,
        microdollars: u64,
        tokens: u64,
    ) -> Result<()> {
        self.enter("extend_window").await?;
        self.inner
            .extend_window(budget, subject, window, microdollars, tokens)
            .await
    }
    async fn put_budget(
        &self,
        budget: &switchboard_store::BudgetRecord,
        fresh_windows: bool,
    ) -> Result<()> {
        self.enter("put_budget").await?;
        self.inner.put_budget(budget, fresh_windows).await
    }
    async fn delete_budget(&self, name: &str) -> Result<bool> {
        self.enter("delete_budget").await?;
        self.inner.delete_budget(name).await
    }
    async fn list_budgets(&self) -> Result<Vec<switchboard_store::BudgetRecord>> {
        self.enter("list_budgets").await?;
        self.inner.list_budgets().await
    }
}
