//! `switchboard users …`, `switchboard tokens …`, `switchboard audit`: a team's people,
//! their personal API tokens and the audit log, on a running server (docs/teams.md).

use std::io::BufRead as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};
use switchboard_client::AuditQuery;
use switchboard_protocol::people::{
    CreateTokenRequest, CreateUserRequest, Role, Scope, TokenInfo, UpdateUserRequest,
};
use uuid::Uuid;

use crate::commands::client;
use crate::config::Settings;

#[derive(Subcommand)]
pub enum UsersCommand {
    /// Add a person: `switchboard users add ann --role member` (`--password-stdin` to let
    /// them sign in to the console with a password read from standard input).
    Add {
        name: String,
        #[arg(long, value_parser = parse_role)]
        role: Role,
        /// Read a console password (at least 12 characters) from the first line of stdin.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Every user with role and linked chat identities.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Change a user's role (their tokens narrow at once).
    SetRole {
        name: String,
        #[arg(value_parser = parse_role)]
        role: Role,
    },
    /// Set a user's console password from the first line of stdin (ends their sign-ins).
    Passwd { name: String },
    /// Remove a user with their tokens, links and sign-ins.
    Remove { name: String },
    /// Link a chat identity to a user: `switchboard users link ann --platform telegram --id 123`
    /// (people can link themselves with `/link CODE`).
    Link {
        name: String,
        /// The chat channel (`telegram`, `slack`, `discord`, …).
        #[arg(long)]
        platform: String,
        /// The platform's id of the person.
        #[arg(long)]
        id: String,
    },
    /// Unlink a chat identity.
    Unlink {
        #[arg(long)]
        platform: String,
        #[arg(long)]
        id: String,
    },
}

#[derive(Subcommand)]
pub enum TokensCommand {
    /// Create a personal API token, printed once:
    /// `switchboard tokens create --user ann --scope sessions:read,sessions:write --expires 30d`.
    Create {
        /// Whose (an admin's choice; default: the caller).
        #[arg(long)]
        user: Option<String>,
        /// What it is for.
        #[arg(long, default_value = "cli")]
        name: String,
        /// Scopes, comma-separated or repeated (see `switchboard tokens scopes`).
        #[arg(long = "scope", required = true, value_delimiter = ',', value_parser = parse_scope)]
        scopes: Vec<Scope>,
        /// Lifetime: `30d`, `12w`, `1y` (days by default); none: it never expires.
        #[arg(long)]
        expires: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Tokens: yours, or for an admin everyone's (`--user` for one person's).
    List {
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by id: refused everywhere from now on.
    Revoke { id: Uuid },
    /// The scopes there are, and which role grants which.
    Scopes,
}

#[derive(Args)]
pub struct AuditArgs {
    /// Only this user's actions.
    #[arg(long)]
    pub user: Option<String>,
    /// Only this action (`signin.failed`, `token.create`, …).
    #[arg(long)]
    pub action: Option<String>,
    /// From this time (RFC 3339) or this long ago (`24h`, `7d`).
    #[arg(long)]
    pub since: Option<String>,
    /// At most this many entries (default: all).
    #[arg(long)]
    pub limit: Option<usize>,
    /// One JSON object per line (an export).
    #[arg(long)]
    pub jsonl: bool,
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| format!("{s:?} is not a role: admin, operator, member or viewer"))
}

fn parse_scope(s: &str) -> Result<Scope, String> {
    Scope::parse(s.trim()).ok_or_else(|| {
        format!(
            "{s:?} is not a scope: {}",
            Scope::ALL.map(Scope::as_str).join(", ")
        )
    })
}

/// `30d`, `12w`, `1y`, `90` → days.
fn days(s: &str) -> Result<u32> {
    let s = s.trim();
    let (n, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, "d"),
    };
    let n: u32 = n.parse().with_context(|| {
        format!("--expires {s:?}: a number of days, weeks or years (30d, 12w, 1y)")
    })?;
    let per = match unit {
        "d" => 1,
        "w" => 7,
        "y" => 365,
        _ => bail!("--expires {s:?}: use d, w or y (30d, 12w, 1y)"),
    };
    Ok(n.saturating_mul(per))
}

fn password_from_stdin() -> Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from stdin")?;
    let p = line.trim_end_matches(['\r', '\n']).to_string();
    if p.is_empty() {
        bail!("no password on stdin");
    }
    Ok(p)
}

fn print_tokens(tokens: &[TokenInfo]) {
    println!(
        "{:<36}  {:<12}  {:<12}  {:<20}  {:<20}  SCOPES",
        "ID", "USER", "NAME", "EXPIRES", "LAST USED"
    );
    for t in tokens {
        let state = if t.revoked_at.is_some() {
            " (revoked)"
        } else {
            ""
        };
        println!(
            "{:<36}  {:<12}  {:<12}  {:<20}  {:<20}  {}{state}",
            t.id,
            t.user,
            t.name,
            t.expires_at.as_deref().map(short).unwrap_or("never"),
            t.last_used_at.as_deref().map(short).unwrap_or("-"),
            t.scopes
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(","),
        );
    }
}

/// `2026-12-05T10:11:12.123456Z` → `2026-12-05T10:11:12Z`.
fn short(t: &str) -> &str {
    t.get(..19).unwrap_or(t)
}

pub async fn users(settings: &Settings, cmd: UsersCommand) -> Result<ExitCode> {
    let c = client(settings)?;
    match cmd {
        UsersCommand::Add {
            name,
            role,
            password_stdin,
        } => {
            let password = password_stdin.then(password_from_stdin).transpose()?;
            let u = c
                .create_user(&CreateUserRequest {
                    name,
                    role,
                    password,
                })
                .await?;
            println!("added {} ({})", u.name, u.role);
        }
        UsersCommand::List { json } => {
            let users = c.list_users().await?.users;
            if json {
                println!("{}", serde_json::to_string_pretty(&users)?);
            } else {
                println!("{:<24}  {:<9}  {:<8}  LINKED", "NAME", "ROLE", "PASSWORD");
                for u in users {
                    let links: Vec<String> = u
                        .links
                        .iter()
                        .map(|l| format!("{}:{}", l.platform, l.user_id))
                        .collect();
                    println!(
                        "{:<24}  {:<9}  {:<8}  {}",
                        u.name,
                        u.role,
                        if u.has_password { "yes" } else { "no" },
                        links.join(" ")
                    );
                }
            }
        }
        UsersCommand::SetRole { name, role } => {
            let u = c
                .update_user(
                    &name,
                    &UpdateUserRequest {
                        role: Some(role),
                        password: None,
                    },
                )
                .await?;
            println!("{} is now {}", u.name, u.role);
        }
        UsersCommand::Passwd { name } => {
            let password = password_from_stdin()?;
            c.update_user(
                &name,
                &UpdateUserRequest {
                    role: None,
                    password: Some(password),
                },
            )
            .await?;
            println!("password of {name} set; their console sign-ins ended");
        }
        UsersCommand::Remove { name } => {
            c.delete_user(&name).await?;
            println!("removed {name}");
        }
        UsersCommand::Link { name, platform, id } => {
            let u = c
                .link(&switchboard_protocol::people::LinkRequest {
                    platform: platform.clone(),
                    user_id: id.clone(),
                    code: None,
                    user: Some(name),
                })
                .await?;
            println!("{platform}:{id} acts as {} ({})", u.name, u.role);
        }
        UsersCommand::Unlink { platform, id } => {
            c.unlink(&platform, &id).await?;
            println!("unlinked {platform}:{id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn tokens(settings: &Settings, cmd: TokensCommand) -> Result<ExitCode> {
    if let TokensCommand::Scopes = cmd {
        for s in Scope::ALL {
            let roles: Vec<&str> = Role::ALL
                .into_iter()
                .filter(|r| r.allows(s))
                .map(Role::as_str)
                .collect();
            println!("{:<18}  {}", s.as_str(), roles.join(", "));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let c = client(settings)?;
    match cmd {
        TokensCommand::Create {
            user,
            name,
            scopes,
            expires,
            json,
        } => {
            let t = c
                .create_token(&CreateTokenRequest {
                    user,
                    name,
                    scopes,
                    expires_in_days: expires.as_deref().map(days).transpose()?,
                })
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                println!("{}", t.token);
                eprintln!(
                    "token {} of {} — shown this once; revoke with `switchboard tokens revoke {}`",
                    t.info.id, t.info.user, t.info.id
                );
            }
        }
        TokensCommand::List { user, json } => {
            let tokens = c.list_tokens(user.as_deref()).await?.tokens;
            if json {
                println!("{}", serde_json::to_string_pretty(&tokens)?);
            } else {
                print_tokens(&tokens);
            }
        }
        TokensCommand::Revoke { id } => {
            let t = c.revoke_token(id).await?;
            println!("revoked {} ({} of {})", t.id, t.name, t.user);
        }
        TokensCommand::Scopes => {}
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn audit(settings: &Settings, args: AuditArgs) -> Result<ExitCode> {
    let c = client(settings)?;
    let from = match args.since.as_deref() {
        None => None,
        Some(s) if chrono::DateTime::parse_from_rfc3339(s).is_ok() => Some(s.to_string()),
        Some(s) => {
            let d = humantime::parse_duration(s).with_context(|| {
                format!("--since {s:?}: an RFC 3339 time or a duration (24h, 7d)")
            })?;
            let d = chrono::Duration::from_std(d).context("--since: too long ago")?;
            Some(switchboard_engine::time_text(chrono::Utc::now() - d))
        }
    };
    let mut q = AuditQuery {
        user: args.user,
        action: args.action,
        from,
        ..AuditQuery::default()
    };
    let mut left = args.limit.unwrap_or(usize::MAX);
    if !args.jsonl {
        println!(
            "{:<6}  {:<19}  {:<16}  {:<16}  {:<8}  TARGET",
            "ID", "AT", "ACTOR", "ACTION", "VIA"
        );
    }
    while left > 0 {
        q.limit = Some(u32::try_from(left.min(1000)).unwrap_or(1000));
        let page = c.audit(&q).await?;
        for e in &page.entries {
            if args.jsonl {
                println!("{}", serde_json::to_string(e)?);
            } else {
                println!(
                    "{:<6}  {:<19}  {:<16}  {:<16}  {:<8}  {}",
                    e.id,
                    short(&e.at),
                    e.actor,
                    e.action,
                    e.via,
                    e.target.as_deref().unwrap_or("-")
                );
            }
        }
        left = left.saturating_sub(page.entries.len());
        match page.next {
            Some(n) => q.after = Some(n),
            None => break,
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[test]
    fn expiry_is_read_in_days() {
        assert_eq!(super::days("30d").unwrap(), 30);
        assert_eq!(super::days("2w").unwrap(), 14);
        assert_eq!(super::days("1y").unwrap(), 365);
        assert_eq!(super::days("90").unwrap(), 90);
        assert!(super::days("3h").is_err());
        assert!(super::days("x").is_err());
    }
}
