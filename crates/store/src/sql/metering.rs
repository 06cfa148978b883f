//! [`Metering`] on either database: metered calls, budget windows, budgets made over the API.

use async_trait::async_trait;
use uuid::Uuid;

use super::{Cols, SqlStore, to_i64, with_db};
use crate::metering::{
    BudgetRecord, CallFilter, CallKey, CallRecord, CallTotals, CallUsage, Metering, Reservation,
    WindowClaim, WindowRecord,
};
use crate::{Result, StoreError};
use switchboard_db::Cols as _;

const CALL_COLS: &str = "id, at, session_id, run_id, user_name, chat, schedule, bundle, backend, \
     provider, model, state, reported, input_tokens, output_tokens, cache_read_tokens, \
     cache_write_tokens, cost_microdollars, reserved_microdollars, reserved_tokens";
const WINDOW_COLS: &str = "budget, subject, window_key, spent_microdollars, spent_tokens, \
     reserved_microdollars, reserved_tokens, extra_microdollars, extra_tokens";

fn uint(r: &impl Cols, col: &str) -> Result<u64> {
    Ok(r.int(col)?.max(0) as u64)
}

fn call_from_row(r: &impl Cols) -> Result<CallRecord> {
    Ok(CallRecord {
        id: r.uuid("id")?,
        at: r.text("at")?,
        session_id: r.opt_uuid("session_id")?,
        run_id: r.opt_uuid("run_id")?,
        user_name: r.opt_text("user_name")?,
        chat: r.opt_text("chat")?,
        schedule: r.opt_text("schedule")?,
        bundle: r.opt_text("bundle")?,
        backend: r.text("backend")?,
        provider: r.text("provider")?,
        model: r.text("model")?,
        state: r.text("state")?,
        reported: r.flag("reported")?,
        input_tokens: uint(r, "input_tokens")?,
        output_tokens: uint(r, "output_tokens")?,
        cache_read_tokens: uint(r, "cache_read_tokens")?,
        cache_write_tokens: uint(r, "cache_write_tokens")?,
        cost_microdollars: r.opt_int("cost_microdollars")?.map(|c| c.max(0) as u64),
        reserved_microdollars: uint(r, "reserved_microdollars")?,
        reserved_tokens: uint(r, "reserved_tokens")?,
    })
}

fn window_from_row(r: &impl Cols) -> Result<WindowRecord> {
    Ok(WindowRecord {
        budget: r.text("budget")?,
        subject: r.text("subject")?,
        window: r.text("window_key")?,
        spent_microdollars: uint(r, "spent_microdollars")?,
        spent_tokens: uint(r, "spent_tokens")?,
        reserved_microdollars: uint(r, "reserved_microdollars")?,
        reserved_tokens: uint(r, "reserved_tokens")?,
        extra_microdollars: uint(r, "extra_microdollars")?,
        extra_tokens: uint(r, "extra_tokens")?,
    })
}

fn totals_from_row(r: &impl Cols) -> Result<CallTotals> {
    Ok(CallTotals {
        calls: uint(r, "calls")?,
        input_tokens: uint(r, "input_tokens")?,
        output_tokens: uint(r, "output_tokens")?,
        cache_read_tokens: uint(r, "cache_read_tokens")?,
        cache_write_tokens: uint(r, "cache_write_tokens")?,
        cost_microdollars: uint(r, "cost_microdollars")?,
        unpriced_calls: uint(r, "unpriced_calls")?,
        unreported_calls: uint(r, "unreported_calls")?,
    })
}

/// The SQL of a grouping key (text on both databases).
fn key_sql(k: CallKey) -> &'static str {
    match k {
        CallKey::Day => "SUBSTR(at, 1, 10)",
        CallKey::Session => "CAST(session_id AS TEXT)",
        CallKey::User => "user_name",
        CallKey::Chat => "chat",
        CallKey::Model => "provider || '/' || model",
        CallKey::Backend => "backend",
        CallKey::Schedule => "schedule",
        CallKey::Bundle => "bundle",
    }
}

/// The filter's `WHERE` (placeholders `$1`…`$5`, bound by [`bind_filter!`]).
const FILTER_SQL: &str = "at >= $1 AND at < $2 AND ($3 IS NULL OR session_id = $3) \
     AND ($4 IS NULL OR user_name = $4) AND ($5 IS NULL OR chat = $5)";

macro_rules! bind_filter {
    ($q:expr, $d:expr, $f:expr) => {
        $q.bind(&$f.from)
            .bind(&$f.to)
            .bind($d.opt_id($f.session_id))
            .bind(&$f.user_name)
            .bind(&$f.chat)
    };
}

/// The window keys of a call's claims, as stored on its row.
fn windows_json(claims: &[WindowClaim]) -> String {
    let keys: Vec<[&str; 3]> = claims
        .iter()
        .map(|c| [c.budget.as_str(), c.subject.as_str(), c.window.as_str()])
        .collect();
    serde_json::to_string(&keys).unwrap_or_else(|_| "[]".into())
}

fn windows_of(json: &str) -> Result<Vec<[String; 3]>> {
    serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("usage windows: {e}")))
}

/// The call row's columns' placeholders (`$1`…`$21`), bound by [`bind_call!`].
const CALL_PARAMS: &str = "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
     $16, $17, $18, $19, $20, $21";

/// Binds a call row's columns to `$1`…`$21` ([`CALL_PARAMS`]).
macro_rules! bind_call {
    ($q:expr, $d:expr, $c:expr, $windows:expr) => {
        $q.bind($d.id($c.id))
            .bind(&$c.at)
            .bind($d.opt_id($c.session_id))
            .bind($d.opt_id($c.run_id))
            .bind(&$c.user_name)
            .bind(&$c.chat)
            .bind(&$c.schedule)
            .bind(&$c.bundle)
            .bind(&$c.backend)
            .bind(&$c.provider)
            .bind(&$c.model)
            .bind(&$c.state)
            .bind($c.reported)
            .bind(to_i64($c.input_tokens)?)
            .bind(to_i64($c.output_tokens)?)
            .bind(to_i64($c.cache_read_tokens)?)
            .bind(to_i64($c.cache_write_tokens)?)
            .bind($c.cost_microdollars.map(to_i64).transpose()?)
            .bind(to_i64($c.reserved_microdollars)?)
            .bind(to_i64($c.reserved_tokens)?)
            .bind($windows)
    };
}

/// Inserts a call row.
macro_rules! insert_call {
    ($tx:expr, $d:expr, $c:expr, $windows:expr) => {
        bind_call!(
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "INSERT INTO usage_calls ({CALL_COLS}, windows) VALUES ({CALL_PARAMS})"
            ))),
            $d,
            $c,
            $windows
        )
        .execute(&mut *$tx)
        .await?
    };
}

/// Binds each claim's seven parameters of [`reserve_sql`], in order.
macro_rules! bind_claims {
    ($q:expr, $claims:expr, $micros:expr, $tokens:expr) => {{
        let mut q = $q;
        for c in $claims {
            q = q
                .bind(&c.budget)
                .bind(&c.subject)
                .bind(&c.window)
                .bind(to_i64($micros)?)
                .bind(to_i64($tokens)?)
                .bind(c.limit_microdollars.map(to_i64).transpose()?)
                .bind(c.limit_tokens.map(to_i64).transpose()?);
        }
        q
    }};
}

/// The upsert that reserves an estimate in `n` windows at once, its parameters from
/// `$first` on (seven a window, bound by [`bind_claims!`]). A new window is made holding the
/// estimate; one that exists takes it only while spent + reserved + it stays within the limit
/// (plus extra) — the row lock of the upsert makes that atomic on both databases. A window
/// that had no room returns no row.
fn reserve_sql(n: usize, first: usize) -> String {
    let rows: Vec<String> = (0..n)
        .map(|i| {
            let b = first + i * 7;
            let p: Vec<String> = (b..b + 7).map(|k| format!("${k}")).collect();
            format!("({})", p.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO budget_windows (budget, subject, window_key, reserved_microdollars, \
         reserved_tokens, limit_microdollars, limit_tokens) VALUES {} \
         ON CONFLICT (budget, subject, window_key) DO UPDATE SET \
         reserved_microdollars = budget_windows.reserved_microdollars + excluded.reserved_microdollars, \
         reserved_tokens = budget_windows.reserved_tokens + excluded.reserved_tokens, \
         limit_microdollars = excluded.limit_microdollars, limit_tokens = excluded.limit_tokens \
         WHERE (excluded.limit_microdollars IS NULL OR budget_windows.spent_microdollars \
             + budget_windows.reserved_microdollars + excluded.reserved_microdollars \
             <= excluded.limit_microdollars + budget_windows.extra_microdollars) \
         AND (excluded.limit_tokens IS NULL OR budget_windows.spent_tokens \
             + budget_windows.reserved_tokens + excluded.reserved_tokens \
             <= excluded.limit_tokens + budget_windows.extra_tokens) \
         RETURNING {WINDOW_COLS}",
        rows.join(", ")
    )
}

/// PostgreSQL's reservation, in one statement and so one round trip (a model call waits for
/// it): the upsert of every window, then the call's row only if every window took the
/// estimate. If some did not, the division by zero aborts the statement and with it what the
/// other windows took — there is no `RAISE` in plain SQL, and a transaction would cost three
/// more round trips (begin, the statement, commit). Not SQLite's way: SQLite has no
/// data-modifying `WITH`.
fn pg_reserve_sql(n: usize) -> String {
    format!(
        "WITH granted AS ({}), \
         call AS (INSERT INTO usage_calls ({CALL_COLS}, windows) SELECT {CALL_PARAMS} \
             WHERE (SELECT COUNT(*) FROM granted) = {n} RETURNING 1) \
         SELECT {WINDOW_COLS}, 1 / (SELECT COUNT(*) FROM call)::INT AS all_granted FROM granted",
        reserve_sql(n, 22)
    )
}

/// SQLSTATE `division_by_zero`: [`pg_reserve_sql`]'s "some window had no room".
const PG_REFUSED: &str = "22012";

/// Makes sure a window's row exists.
macro_rules! ensure_window {
    ($tx:expr, $budget:expr, $subject:expr, $window:expr) => {
        sqlx::query(
            "INSERT INTO budget_windows (budget, subject, window_key) VALUES ($1, $2, $3) \
             ON CONFLICT (budget, subject, window_key) DO NOTHING",
        )
        .bind($budget)
        .bind($subject)
        .bind($window)
        .execute(&mut *$tx)
        .await?
    };
}

/// Moves `(micros, tokens)` held in a window to spent `(spent_m, spent_t)`; the window after.
macro_rules! settle_window {
    ($tx:expr, $key:expr, $held:expr, $spent:expr) => {
        sqlx::query(sqlx::AssertSqlSafe(&*format!(
            "UPDATE budget_windows SET \
             reserved_microdollars = CASE WHEN reserved_microdollars > $4 \
                 THEN reserved_microdollars - $4 ELSE 0 END, \
             reserved_tokens = CASE WHEN reserved_tokens > $5 \
                 THEN reserved_tokens - $5 ELSE 0 END, \
             spent_microdollars = spent_microdollars + $6, spent_tokens = spent_tokens + $7 \
             WHERE budget = $1 AND subject = $2 AND window_key = $3 RETURNING {WINDOW_COLS}"
        )))
        .bind(&$key[0])
        .bind(&$key[1])
        .bind(&$key[2])
        .bind(to_i64($held.0)?)
        .bind(to_i64($held.1)?)
        .bind(to_i64($spent.0)?)
        .bind(to_i64($spent.1)?)
        .fetch_optional(&mut *$tx)
        .await?
    };
}

impl SqlStore {
    /// The window that refused a reservation, as it stands: the first not `granted` that has
    /// no room for the estimate now (or the first not granted, if room has been freed since).
    async fn refusing(
        &self,
        claims: &[WindowClaim],
        granted: &[WindowRecord],
        (micros, tokens): (u64, u64),
    ) -> Result<WindowRecord> {
        let mut first = None;
        for c in claims {
            let took = granted
                .iter()
                .any(|w| w.budget == c.budget && w.subject == c.subject && w.window == c.window);
            if took {
                continue;
            }
            let w = self.window(c).await?;
            let full = c.limit_microdollars.is_some_and(|l| {
                w.spent_microdollars + w.reserved_microdollars + micros > l + w.extra_microdollars
            }) || c
                .limit_tokens
                .is_some_and(|l| w.spent_tokens + w.reserved_tokens + tokens > l + w.extra_tokens);
            if full {
                return Ok(w);
            }
            first.get_or_insert(w);
        }
        first.ok_or_else(|| StoreError::Corrupt("a reservation refused by no window".into()))
    }

    /// A window as it stands (an empty one when it has no row yet).
    async fn window(&self, c: &WindowClaim) -> Result<WindowRecord> {
        let row = with_db!(self, |pool, _d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {WINDOW_COLS} FROM budget_windows \
                 WHERE budget = $1 AND subject = $2 AND window_key = $3"
            )))
            .bind(&c.budget)
            .bind(&c.subject)
            .bind(&c.window)
            .fetch_optional(pool)
            .await?
            .map(|r| window_from_row(&r))
            .transpose()?
        });
        Ok(row.unwrap_or_else(|| WindowRecord {
            budget: c.budget.clone(),
            subject: c.subject.clone(),
            window: c.window.clone(),
            ..WindowRecord::default()
        }))
    }
}

#[async_trait]
impl Metering for SqlStore {
    async fn reserve_call(&self, call: &CallRecord, claims: &[WindowClaim]) -> Result<Reservation> {
        let (micros, tokens) = (call.reserved_microdollars, call.reserved_tokens);
        // A window that could not hold the estimate even empty holds it only with an
        // approver's extra: those (rare) are looked at first, by reading.
        for c in claims {
            let over = c.limit_microdollars.is_some_and(|l| micros > l)
                || c.limit_tokens.is_some_and(|l| tokens > l);
            if over {
                let w = self.window(c).await?;
                let fits = c.limit_microdollars.is_none_or(|l| {
                    w.spent_microdollars + w.reserved_microdollars + micros
                        <= l + w.extra_microdollars
                }) && c.limit_tokens.is_none_or(|l| {
                    w.spent_tokens + w.reserved_tokens + tokens <= l + w.extra_tokens
                });
                if !fits {
                    return Ok(Reservation::Refused(w));
                }
            }
        }
        let windows = windows_json(claims);
        let granted: Vec<WindowRecord> = match &self.db {
            _ if claims.is_empty() => {
                with_db!(self, |pool, d| {
                    let mut conn = pool.acquire().await?;
                    insert_call!(conn, d, call, &windows);
                });
                Vec::new()
            }
            switchboard_db::Db::Postgres(pool) => {
                let d = super::Pg;
                let sql = pg_reserve_sql(claims.len());
                let q = bind_claims!(
                    bind_call!(sqlx::query(sqlx::AssertSqlSafe(&*sql)), d, call, &windows),
                    claims,
                    micros,
                    tokens
                );
                match q.fetch_all(pool).await {
                    Ok(rows) => rows.iter().map(window_from_row).collect::<Result<_>>()?,
                    Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(PG_REFUSED) => {
                        Vec::new()
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            switchboard_db::Db::Sqlite(pool) => {
                let d = super::Sqlite;
                let sql = reserve_sql(claims.len(), 1);
                let mut tx = pool.begin().await?;
                // The write first: it takes the write lock for the whole reservation.
                insert_call!(tx, d, call, &windows);
                let q = bind_claims!(
                    sqlx::query(sqlx::AssertSqlSafe(&*sql)),
                    claims,
                    micros,
                    tokens
                );
                let granted = q
                    .fetch_all(&mut *tx)
                    .await?
                    .iter()
                    .map(window_from_row)
                    .collect::<Result<Vec<_>>>()?;
                if granted.len() < claims.len() {
                    tx.rollback().await?;
                } else {
                    tx.commit().await?;
                }
                granted
            }
        };
        let key = |w: &WindowRecord, c: &WindowClaim| {
            w.budget == c.budget && w.subject == c.subject && w.window == c.window
        };
        let mut ordered = Vec::with_capacity(claims.len());
        for c in claims {
            match granted.iter().find(|w| key(w, c)) {
                Some(w) => ordered.push(w.clone()),
                // Some window had no room: nothing was written.
                None => {
                    return Ok(Reservation::Refused(
                        self.refusing(claims, &granted, (micros, tokens)).await?,
                    ));
                }
            }
        }
        Ok(Reservation::Granted(ordered))
    }

    async fn settle_call(&self, id: Uuid, usage: &CallUsage) -> Result<Option<Vec<WindowRecord>>> {
        with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            let row = sqlx::query(
                "UPDATE usage_calls SET state = 'settled', reported = $2, input_tokens = $3, \
                 output_tokens = $4, cache_read_tokens = $5, cache_write_tokens = $6, \
                 cost_microdollars = $7 WHERE id = $1 AND state = 'reserved' \
                 RETURNING reserved_microdollars, reserved_tokens, windows",
            )
            .bind(d.id(id))
            .bind(usage.reported)
            .bind(to_i64(usage.input_tokens)?)
            .bind(to_i64(usage.output_tokens)?)
            .bind(to_i64(usage.cache_read_tokens)?)
            .bind(to_i64(usage.cache_write_tokens)?)
            .bind(usage.cost_microdollars.map(to_i64).transpose()?)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(row) = row else {
                return Ok(None);
            };
            let held = (
                uint(&row, "reserved_microdollars")?,
                uint(&row, "reserved_tokens")?,
            );
            let spent = usage.spent(held.0, held.1);
            let mut after = Vec::new();
            for key in windows_of(&row.text("windows")?)? {
                if let Some(w) = settle_window!(tx, key, held, spent) {
                    after.push(window_from_row(&w)?);
                }
            }
            tx.commit().await?;
            Ok(Some(after))
        })
    }

    async fn lose_calls(&self, run_id: Uuid) -> Result<u64> {
        with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            let rows = sqlx::query(
                "UPDATE usage_calls SET state = 'lost', reported = FALSE \
                 WHERE run_id = $1 AND state = 'reserved' \
                 RETURNING reserved_microdollars, reserved_tokens, windows",
            )
            .bind(d.id(run_id))
            .fetch_all(&mut *tx)
            .await?;
            for row in &rows {
                let held = (
                    uint(row, "reserved_microdollars")?,
                    uint(row, "reserved_tokens")?,
                );
                for key in windows_of(&row.text("windows")?)? {
                    settle_window!(tx, key, held, held);
                }
            }
            tx.commit().await?;
            Ok(rows.len() as u64)
        })
    }

    async fn record_call(&self, call: &CallRecord, claims: &[WindowClaim]) -> Result<()> {
        let windows = windows_json(claims);
        let usage = CallUsage {
            reported: call.reported,
            input_tokens: call.input_tokens,
            output_tokens: call.output_tokens,
            cache_read_tokens: call.cache_read_tokens,
            cache_write_tokens: call.cache_write_tokens,
            cost_microdollars: call.cost_microdollars,
        };
        let spent = usage.spent(call.reserved_microdollars, call.reserved_tokens);
        with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            insert_call!(tx, d, call, &windows);
            for c in claims {
                ensure_window!(tx, &c.budget, &c.subject, &c.window);
                let key = [c.budget.clone(), c.subject.clone(), c.window.clone()];
                settle_window!(tx, key, (0u64, 0u64), spent);
            }
            tx.commit().await?;
            Ok(())
        })
    }

    async fn list_calls(&self, filter: &CallFilter, limit: u32) -> Result<Vec<CallRecord>> {
        with_db!(self, |pool, d| {
            let sql = format!(
                "SELECT {CALL_COLS} FROM usage_calls WHERE {FILTER_SQL} \
                 ORDER BY at DESC, id DESC LIMIT $6"
            );
            bind_filter!(sqlx::query(sqlx::AssertSqlSafe(&*sql)), d, filter)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
                .iter()
                .map(call_from_row)
                .collect()
        })
    }

    async fn call_totals(
        &self,
        filter: &CallFilter,
        keys: &[CallKey],
    ) -> Result<Vec<(Vec<Option<String>>, CallTotals)>> {
        let selected: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{} AS k{i}, ", key_sql(*k)))
            .collect();
        let group = if keys.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = (0..keys.len()).map(|i| format!("k{i}")).collect();
            format!(" GROUP BY {}", names.join(", "))
        };
        let sum = |col: &str| format!("CAST(COALESCE(SUM({col}), 0) AS BIGINT) AS {col}");
        let sql = format!(
            "SELECT {}COUNT(*) AS calls, {}, {}, {}, {}, {}, \
             CAST(COALESCE(SUM(CASE WHEN reported AND cost_microdollars IS NULL THEN 1 ELSE 0 END), 0) AS BIGINT) AS unpriced_calls, \
             CAST(COALESCE(SUM(CASE WHEN reported THEN 0 ELSE 1 END), 0) AS BIGINT) AS unreported_calls \
             FROM usage_calls WHERE {FILTER_SQL}{group}",
            selected.concat(),
            sum("input_tokens"),
            sum("output_tokens"),
            sum("cache_read_tokens"),
            sum("cache_write_tokens"),
            sum("cost_microdollars"),
        );
        with_db!(self, |pool, d| {
            let rows = bind_filter!(sqlx::query(sqlx::AssertSqlSafe(&*sql)), d, filter)
                .fetch_all(pool)
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let totals = totals_from_row(r)?;
                let mut values = Vec::with_capacity(keys.len());
                for i in 0..keys.len() {
                    values.push(r.opt_text(&format!("k{i}"))?);
                }
                out.push((values, totals));
            }
            Ok(out)
        })
    }

    async fn unpriced_models(&self, filter: &CallFilter) -> Result<Vec<(String, String)>> {
        with_db!(self, |pool, d| {
            let sql = format!(
                "SELECT DISTINCT provider, model FROM usage_calls WHERE {FILTER_SQL} \
                 AND reported AND cost_microdollars IS NULL ORDER BY provider, model"
            );
            let rows = bind_filter!(sqlx::query(sqlx::AssertSqlSafe(&*sql)), d, filter)
                .fetch_all(pool)
                .await?;
            rows.iter()
                .map(|r| Ok((r.text("provider")?, r.text("model")?)))
                .collect()
        })
    }

    async fn budget_windows(&self, budget: &str, window: &str) -> Result<Vec<WindowRecord>> {
        with_db!(self, |pool, _d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {WINDOW_COLS} FROM budget_windows WHERE budget = $1 AND window_key = $2 \
                 ORDER BY spent_microdollars DESC, spent_tokens DESC, subject"
            )))
            .bind(budget)
            .bind(window)
            .fetch_all(pool)
            .await?
            .iter()
            .map(window_from_row)
            .collect()
        })
    }

    async fn seed_window(&self, w: &WindowRecord) -> Result<bool> {
        with_db!(self, |pool, _d| {
            Ok(sqlx::query(
                "INSERT INTO budget_windows (budget, subject, window_key, spent_microdollars, \
                 spent_tokens) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (budget, subject, window_key) DO NOTHING",
            )
            .bind(&w.budget)
            .bind(&w.subject)
            .bind(&w.window)
            .bind(to_i64(w.spent_microdollars)?)
            .bind(to_i64(w.spent_tokens)?)
            .execute(pool)
            .await?
            .rows_affected()
                > 0)
        })
    }

    async fn extend_window(
        &self,
        budget: &str,
        subject: &str,
        window: &str,
        microdollars: u64,
        tokens: u64,
    ) -> Result<()> {
        with_db!(self, |pool, _d| {
            let mut tx = pool.begin().await?;
            ensure_window!(tx, budget, subject, window);
            sqlx::query(
                "UPDATE budget_windows SET extra_microdollars = extra_microdollars + $4, \
                 extra_tokens = extra_tokens + $5 \
                 WHERE budget = $1 AND subject = $2 AND window_key = $3",
            )
            .bind(budget)
            .bind(subject)
            .bind(window)
            .bind(to_i64(microdollars)?)
            .bind(to_i64(tokens)?)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    async fn put_budget(&self, b: &BudgetRecord, fresh_windows: bool) -> Result<()> {
        with_db!(self, |pool, _d| {
            let mut tx = pool.begin().await?;
            sqlx::query(
                "INSERT INTO budgets (name, spec, created_at, created_by) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (name) DO UPDATE SET spec = excluded.spec",
            )
            .bind(&b.name)
            .bind(&b.spec)
            .bind(&b.created_at)
            .bind(&b.created_by)
            .execute(&mut *tx)
            .await?;
            if fresh_windows {
                sqlx::query("DELETE FROM budget_windows WHERE budget = $1")
                    .bind(&b.name)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    async fn delete_budget(&self, name: &str) -> Result<bool> {
        with_db!(self, |pool, _d| {
            let mut tx = pool.begin().await?;
            let gone = sqlx::query("DELETE FROM budgets WHERE name = $1")
                .bind(name)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                > 0;
            sqlx::query("DELETE FROM budget_windows WHERE budget = $1")
                .bind(name)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(gone)
        })
    }

    async fn list_budgets(&self) -> Result<Vec<BudgetRecord>> {
        with_db!(self, |pool, _d| {
            sqlx::query("SELECT name, spec, created_at, created_by FROM budgets ORDER BY name")
                .fetch_all(pool)
                .await?
                .iter()
                .map(|r| {
                    Ok(BudgetRecord {
                        name: r.text("name")?,
                        spec: r.text("spec")?,
                        created_at: r.text("created_at")?,
                        created_by: r.text("created_by")?,
                    })
                })
                .collect()
        })
    }
}
