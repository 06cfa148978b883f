//! The state of one ACP connection: the sessions it has open, their runs and the permission requests waiting in the editor.

use super::*;

/// How a run ended, as the prompt that waits for it learns.
#[derive(Debug, Clone)]
pub(crate) enum Ending {
    /// The run's outcome and the backend's own reason.
    Done(switchboard_protocol::StopReason, Option<String>),
    Failed {
        error: String,
        retryable: bool,
    },
}

#[derive(Default)]
pub(crate) struct Runs {
    /// Texts of prompts sent by this editor whose run has not started yet: their
    /// `RunStarted` is not echoed back as the user's message.
    pub(crate) pending_prompts: Vec<String>,
    pub(crate) waiters: HashMap<Uuid, oneshot::Sender<Ending>>,
    /// Runs that ended before anyone waited for them (a fast run, a race with the answer
    /// of `send_message`).
    pub(crate) ended: HashMap<Uuid, Ending>,
    /// The editor's run under way (what `session/cancel` cancels).
    pub(crate) current: Option<Uuid>,
    /// A `session/cancel` came while the prompt was still being sent.
    pub(crate) cancel_pending: bool,
    /// Runs the follower saw start (a cancelled one that never started ends here).
    pub(crate) started: HashSet<Uuid>,
    /// The follower stopped for good: why (prompts fail at once instead of waiting).
    pub(crate) closed: Option<String>,
}

/// A session this connection has open.
pub(crate) struct Open {
    pub(crate) id: Uuid,
    pub(crate) runs: Mutex<Runs>,
    /// Permission requests waiting in the editor, by tool call id, with their run.
    pub(crate) asks:
        Mutex<HashMap<String, (Uuid, agent_client_protocol::RequestCancellationHandle)>>,
    /// Calls the editor was asked about (asked once each).
    pub(crate) asked: Mutex<HashSet<String>>,
    pub(crate) follower: Mutex<Option<JoinHandle<()>>>,
}

impl Open {
    pub(crate) fn new(id: Uuid) -> Arc<Self> {
        Arc::new(Self {
            id,
            runs: Mutex::new(Runs::default()),
            asks: Mutex::new(HashMap::new()),
            asked: Mutex::new(HashSet::new()),
            follower: Mutex::new(None),
        })
    }

    /// Whether a `RunStarted` with this content is one of this editor's prompts.
    pub(crate) fn take_own_prompt(&self, content: Option<&str>) -> bool {
        let mut runs = self.runs.lock();
        let Some(c) = content else { return false };
        match runs.pending_prompts.iter().position(|p| p == c) {
            Some(i) => {
                runs.pending_prompts.remove(i);
                true
            }
            None => false,
        }
    }

    pub(crate) fn end(&self, run: Uuid, ending: Ending) {
        let mut runs = self.runs.lock();
        match runs.waiters.remove(&run) {
            Some(tx) => {
                let _ = tx.send(ending);
            }
            None => {
                // Bounded: only the most recent endings matter.
                if runs.ended.len() > 256 {
                    runs.ended.clear();
                }
                runs.ended.insert(run, ending);
            }
        }
    }

    /// Every waiting prompt ends with `error`, and later ones fail at once (the follower
    /// stopped for good; `session/load` opens it again).
    pub(crate) fn fail_all(&self, error: &str) {
        let mut runs = self.runs.lock();
        runs.closed = Some(error.to_owned());
        for (_, tx) in runs.waiters.drain() {
            let _ = tx.send(Ending::Failed {
                error: error.to_owned(),
                retryable: true,
            });
        }
    }

    /// `session/close`: every prompt waiting here answers `cancelled` (their runs are
    /// cancelled by the caller).
    pub(crate) fn cancel_waiting(&self) {
        let mut runs = self.runs.lock();
        for (_, tx) in runs.waiters.drain() {
            let _ = tx.send(Ending::Done(
                switchboard_protocol::StopReason::Cancelled,
                None,
            ));
        }
    }

    /// The call was decided (here or elsewhere): a request still open in the editor is
    /// withdrawn.
    pub(crate) fn withdraw(&self, tool_call_id: &str) {
        if let Some((_, handle)) = self.asks.lock().remove(tool_call_id) {
            tracing::debug!(session = %self.id, tool_call_id, "withdrawing the editor's permission request");
            let _ = handle.cancel();
        }
    }

    /// The run ended: what the editor was still asked about it is withdrawn.
    pub(crate) fn withdraw_run(&self, run: Uuid) {
        self.asks.lock().retain(|_, (r, handle)| {
            if *r == run {
                let _ = handle.cancel();
            }
            *r != run
        });
    }

    /// Stops the follower and withdraws the questions it asked (the prompts waiting stay:
    /// a new follower ends them).
    pub(crate) fn stop_follower(&self) {
        if let Some(task) = self.follower.lock().take() {
            task.abort();
        }
        for (_, (_, h)) in self.asks.lock().drain() {
            let _ = h.cancel();
        }
        self.asked.lock().clear();
    }

    /// The connection ends.
    pub(crate) fn stop(&self) {
        self.stop_follower();
        self.fail_all("the connection closed");
    }
}

pub(crate) struct Hub {
    pub(crate) api: Api,
    pub(crate) opts: HubOptions,
    pub(crate) open: Mutex<HashMap<Uuid, Arc<Open>>>,
    /// The built-in agent's provider's models, asked once ([`config`]).
    pub(crate) models: tokio::sync::OnceCell<Vec<String>>,
    /// The editor can show forms (`elicitation/create` in form mode).
    pub(crate) forms: std::sync::atomic::AtomicBool,
}

impl Hub {
    pub(crate) fn session(&self, id: &str) -> Result<Arc<Open>, Error> {
        let uuid = parse_id(id)?;
        self.open.lock().get(&uuid).cloned().ok_or_else(|| {
            Error::new(
                ErrorCode::RESOURCE_NOT_FOUND,
                format!("session {id} is not open on this connection: session/new or session/load it first"),
            )
        })
    }

    /// Opens `id` on this connection: its follower forwards every event after `from` (the
    /// history from there to `replay_to` as history, not asked about); the returned
    /// receiver fires once events up to `replay_to` have been forwarded.
    pub(crate) fn open_session(
        self: &Arc<Self>,
        cx: &v1::ConnectionTo<Client>,
        id: Uuid,
        from: u64,
        replay_to: u64,
    ) -> oneshot::Receiver<()> {
        // Opened again (`session/load` of an open session): the same state, so that a
        // prompt waiting on it is still answered, with a new follower replaying the log.
        let open = self
            .open
            .lock()
            .entry(id)
            .or_insert_with(|| Open::new(id))
            .clone();
        open.stop_follower();
        open.runs.lock().closed = None;
        let (caught_tx, caught_rx) = oneshot::channel();
        let task = tokio::spawn(follow(
            self.clone(),
            open.clone(),
            cx.clone(),
            (from, replay_to),
            caught_tx,
        ));
        *open.follower.lock() = Some(task);
        caught_rx
    }

    /// `session/close`: the session is no longer followed here (it stays on the server).
    pub(crate) fn close(&self, id: Uuid) -> Option<Arc<Open>> {
        let open = self.open.lock().remove(&id)?;
        open.stop_follower();
        open.fail_all("the session was closed");
        Some(open)
    }

    pub(crate) fn close_all(&self) {
        for (_, open) in self.open.lock().drain() {
            open.stop();
        }
    }
}
