//! [`Pipeline`]: appends that do not wait for their commit.

use super::*;

impl Pipeline {
    /// Queues a text delta (`thought: false`) or a thought delta.
    pub async fn send(&self, run_id: Uuid, thought: bool, text: String) -> Result<(), EngineError> {
        self.check()?;
        let req = WriteReq {
            session_id: self.session_id,
            events: vec![Pending {
                kind: if thought {
                    "thought_delta"
                } else {
                    "text_delta"
                },
                run_id: Some(run_id),
                body: Body::Delta { thought, text },
            }],
            fence: self.fence.clone(),
            finish: None,
            reply: Reply::Pipe(self.state.clone()),
        };
        self.log
            .writer
            .send(req)
            .await
            .map_err(|_| EngineError::ShuttingDown)
    }

    /// Waits until everything sent so far is committed (or dropped after a failure), and
    /// returns the pipeline's failure if there was one.
    pub async fn flush(&self) -> Result<(), EngineError> {
        self.log
            .write(self.session_id, Vec::new(), None, None)
            .await?;
        self.check()
    }

    /// The pipeline's failure, if one of its writes failed.
    pub fn check(&self) -> Result<(), EngineError> {
        match self.state.failed.get() {
            None => Ok(()),
            Some(e) => Err(engine_error(self.session_id, e.clone())),
        }
    }
}
