//! `switchboard search QUERY`: every session's transcript and file names, best first
//! (`GET /v1/search`).

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use switchboard_protocol::search::{SearchHitKind, SearchParams, SnippetPart};

use crate::commands::client;
use crate::config::Settings;

#[derive(Args)]
pub struct SearchArgs {
    /// Words (all required), "quoted phrases" and prefix* words.
    #[arg(required = true, num_args = 1..)]
    pub query: Vec<String>,
    /// Only this session.
    #[arg(long)]
    pub session: Option<uuid::Uuid>,
    /// Only sessions of this backend: builtin, or an agent's name.
    #[arg(long)]
    pub backend: Option<String>,
    /// Only what was said at or after this time (RFC 3339).
    #[arg(long)]
    pub from: Option<String>,
    /// Only what was said before this time (RFC 3339).
    #[arg(long)]
    pub to: Option<String>,
    /// Hits to show (at most 100).
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn search(settings: &Settings, args: SearchArgs) -> Result<ExitCode> {
    let c = client(settings)?;
    let answer = c
        .search(&SearchParams {
            q: args.query.join(" "),
            session: args.session,
            sessions: None,
            backend: args.backend,
            from: args.from,
            to: args.to,
            limit: Some(args.limit),
            cursor: None,
        })
        .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(ExitCode::SUCCESS);
    }
    if answer.hits.is_empty() {
        eprintln!("nothing found");
        return Ok(ExitCode::FAILURE);
    }
    for h in &answer.hits {
        let what = match h.kind {
            SearchHitKind::Message => h.role.clone().unwrap_or_else(|| "message".into()),
            SearchHitKind::File => "file".into(),
        };
        let at = h.seq.map(|s| format!(" @{s}")).unwrap_or_default();
        // Titles and passages are other people's text: control characters are shown as
        // spaces, so nothing in them can drive the terminal.
        println!(
            "{} {}{at} — {what}, {}",
            h.session_id,
            printable(&h.session_title),
            h.created_at
        );
        let passage = SnippetPart::render(&h.snippet, "[", "]");
        println!("    {}", printable(&passage).trim());
    }
    if answer.next_cursor.is_some() {
        eprintln!("(more hits: a larger --limit, up to 100, or narrow the query)");
    }
    Ok(ExitCode::SUCCESS)
}

/// One line: line breaks and control characters shown as spaces.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
