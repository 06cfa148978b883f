//! The operations of the API: create, list, get, update, delete, run now, firings, redeliver.

use super::*;

impl Scheduler {
    /// The gateway's channel names (none when the server runs no gateway).
    pub async fn channels(&self) -> Vec<String> {
        match self.inner.client.gateway_status().await {
            Ok(s) => s.channels.into_iter().map(|c| c.name).collect(),
            Err(e) => {
                if e.status() != Some(404) {
                    tracing::warn!(error = %e, "reading the gateway's channels failed");
                }
                Vec::new()
            }
        }
    }

    // ---- the operations of the API ----

    pub async fn create(&self, mut spec: ScheduleSpec) -> Result<Schedule, SchedulerError> {
        let now = self.now();
        let channels = if spec.deliver.is_empty() {
            Vec::new()
        } else {
            self.channels().await
        };
        let trigger = spec::check(&mut spec, now, &channels)?;
        let row = ScheduleRow {
            id: Uuid::new_v4(),
            paused: spec.paused,
            next_due: trigger.next_after(now),
            spec,
            created_at: now,
            updated_at: now,
        };
        self.inner.store.insert_schedule(&row).await?;
        Ok(view(&row))
    }

    pub async fn list(&self) -> Result<Vec<Schedule>, SchedulerError> {
        Ok(self
            .inner
            .store
            .schedules()
            .await?
            .iter()
            .map(view)
            .collect())
    }

    pub(super) async fn row(&self, id: Uuid) -> Result<ScheduleRow, SchedulerError> {
        self.inner
            .store
            .schedule(id)
            .await?
            .ok_or(SchedulerError::NotFound(id))
    }

    pub async fn get(&self, id: Uuid) -> Result<Schedule, SchedulerError> {
        Ok(view(&self.row(id).await?))
    }

    pub async fn update(
        &self,
        id: Uuid,
        req: UpdateScheduleRequest,
    ) -> Result<Schedule, SchedulerError> {
        let mut row = self.row(id).await?;
        let now = self.now();
        let was_paused = row.paused;
        let mut spec = row.spec.clone();
        let new_trigger = req.changes_trigger();
        if new_trigger {
            spec.cron = req.cron.clone();
            spec.tz = req.tz.clone();
            spec.every = req.every.clone();
            spec.at = req.at.clone();
            spec.in_ = req.in_.clone();
        }
        if let Some(v) = req.name {
            spec.name = Some(v);
        }
        if let Some(v) = req.prompt {
            spec.prompt = v;
        }
        if let Some(v) = req.deliver {
            spec.deliver = v;
        }
        if let Some(v) = req.approvals {
            spec.approvals = v;
            if v != ScheduleApprovals::AutoApprove && req.auto_approve.is_none() {
                spec.auto_approve = None;
            }
            if v != ScheduleApprovals::Ask && req.ask_timeout.is_none() {
                spec.ask_timeout = None;
            }
        }
        if let Some(v) = req.auto_approve {
            spec.auto_approve = Some(v);
        }
        if let Some(v) = req.ask_timeout {
            spec.ask_timeout = Some(v);
        }
        if let Some(v) = req.missed {
            spec.missed = v;
        }
        if let Some(v) = req.overlap {
            spec.overlap = v;
        }
        if let Some(v) = req.paused {
            spec.paused = v;
            row.paused = v;
        }
        let channels = if spec.deliver.is_empty() {
            Vec::new()
        } else {
            self.channels().await
        };
        if new_trigger {
            let trigger = spec::check(&mut spec, now, &channels)?;
            row.next_due = trigger.next_after(now);
        } else {
            // The rest is checked as at creation, the stored trigger kept as it is.
            let mut probe = spec.clone();
            probe.cron = Some("0 0 * * *".into());
            probe.tz = None;
            probe.every = None;
            probe.at = None;
            probe.in_ = None;
            spec::check(&mut probe, now, &channels)?;
            spec.deliver = probe.deliver;
            spec.name = probe.name;
            if was_paused && !row.paused {
                // Resumed: from now on; what fell due while paused is not run.
                row.next_due = trigger_of(&row).ok().and_then(|t| t.next_after(now));
            }
        }
        row.spec = spec;
        row.updated_at = now;
        if !self.inner.store.update_schedule(&row).await? {
            return Err(SchedulerError::NotFound(id));
        }
        Ok(view(&row))
    }

    pub async fn delete(&self, id: Uuid) -> Result<(), SchedulerError> {
        if self.inner.store.delete_schedule(id).await? {
            Ok(())
        } else {
            Err(SchedulerError::NotFound(id))
        }
    }

    /// A firing now, by hand: it runs at once, or after the running one (whatever the
    /// overlap policy: it was asked for).
    pub async fn run_now(&self, id: Uuid) -> Result<Firing, SchedulerError> {
        let row = self.row(id).await?;
        let active = self.inner.store.active(row.id).await?;
        let status = if active.is_empty() {
            FiringStatus::Starting
        } else {
            FiringStatus::Queued
        };
        let mut firing = new_firing(row.id, self.now(), status);
        firing.manual = true;
        let f = FiringRow::new(firing.clone());
        self.inner
            .store
            .insert_firing(&f, &self.inner.opts.instance, self.lease_until())
            .await?;
        self.drive(f);
        Ok(firing)
    }

    pub async fn firings(&self, id: Uuid) -> Result<Vec<Firing>, SchedulerError> {
        self.row(id).await?;
        Ok(self
            .inner
            .store
            .firings(id, HISTORY_LIMIT)
            .await?
            .into_iter()
            .map(|f| f.firing)
            .collect())
    }

    /// Tries a firing's failed deliveries again (by hand).
    pub async fn redeliver(&self, id: Uuid, firing: Uuid) -> Result<Firing, SchedulerError> {
        self.row(id).await?;
        let mut f = match self.inner.store.firing(firing).await? {
            Some(f) if f.firing.schedule_id == id => f,
            _ => return Err(SchedulerError::FiringNotFound(firing)),
        };
        if f.open {
            return Err(SchedulerError::Conflict(
                "this firing is still being worked on (its run or its deliveries); try again when it is done".into(),
            ));
        }
        let mut any = false;
        for d in &mut f.firing.deliveries {
            if d.status == DeliveryStatus::Failed {
                d.status = DeliveryStatus::Pending;
                d.next_attempt_at = None;
                d.attempts = 0;
                any = true;
            }
        }
        if !any {
            return Err(SchedulerError::Conflict(
                "no failed delivery to try again".into(),
            ));
        }
        if !self.inner.store.reopen_firing(&f).await? {
            return Err(SchedulerError::Conflict(
                "this firing is already being worked on".into(),
            ));
        }
        Ok(f.firing)
    }
}
