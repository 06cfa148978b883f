//! MCP servers given to a session's agent (`[mcp.servers.NAME]`, or `mcp_servers` in
//! `POST /v1/sessions`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One MCP server: a command speaking MCP on stdio, or a streamable-HTTP URL.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerSpec {
    /// Letters, digits, `_` and `-` (1–64): the built-in agent names its tools
    /// `mcp__NAME__TOOL`.
    pub name: String,
    /// stdio: the program, started in the session's workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment of the program (shown redacted by the API).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// streamable HTTP: the server's URL (`http://` or `https://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers sent to it (shown redacted by the API).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// Written by hand: one of two shapes ([`McpServerSpec::problem`] is the server's check),
/// which the derive cannot say — a stdio server (`command`, with `args` and `env`) or a
/// streamable-HTTP one (`url`, with `headers`); the other shape's fields absent, `null` or
/// empty.
impl utoipa::PartialSchema for McpServerSpec {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use crate::schema::{array, null, one_of, string, string_map, t};
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let name = || {
            string(Some("^[A-Za-z0-9_-]{1,64}$")).description(Some(
                "Letters, digits, `_` and `-` (1–64): the built-in agent names its tools `mcp__NAME__TOOL`",
            ))
        };
        let shape = || {
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .additional_properties(Some(
                    utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
                ))
                .required("name")
                .property("name", name())
        };
        let stdio = shape()
            .title(Some("stdio"))
            .required("command")
            .property(
                "command",
                string(Some(r"\S"))
                    .description(Some("The program, started in the session's workspace")),
            )
            .property("args", array(string(None), None))
            .property(
                "env",
                string_map(None).description(Some("Shown redacted by the API")),
            )
            .property("url", null())
            .property("headers", string_map(Some(0)));
        let http = shape()
            .title(Some("http"))
            .required("url")
            .property(
                "url",
                string(Some("^https?://"))
                    .description(Some("The server's URL (`http://` or `https://`)")),
            )
            .property(
                "headers",
                string_map(None).description(Some("Sent to it; shown redacted by the API")),
            )
            .property("command", null())
            .property("args", array(string(None), Some(0)))
            .property("env", string_map(Some(0)));
        one_of([t(stdio), t(http)])
    }
}

impl ToSchema for McpServerSpec {}

/// Most MCP servers one session may have.
pub const MAX_MCP_SERVERS: usize = 16;

impl McpServerSpec {
    /// Why it cannot be used, if it cannot: the name, exactly one of `command` and `url`.
    pub fn problem(&self) -> Option<String> {
        let n = &self.name;
        if n.is_empty()
            || n.len() > 64
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Some(format!(
                "name {n:?}: use 1 to 64 letters, digits, '_' or '-'"
            ));
        }
        match (&self.command, &self.url) {
            (Some(c), None) if c.trim().is_empty() => Some(format!("{n}: empty command")),
            (Some(_), None) if !self.headers.is_empty() => {
                Some(format!("{n}: headers are for url servers"))
            }
            (Some(_), None) => None,
            (None, Some(u)) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                Some(format!("{n}: url must start with http:// or https://"))
            }
            (None, Some(_)) if !self.args.is_empty() || !self.env.is_empty() => {
                Some(format!("{n}: args and env are for command servers"))
            }
            (None, Some(_)) => None,
            _ => Some(format!("{n}: give exactly one of command and url")),
        }
    }

    /// The same with what may hold secrets hidden: the values of `env` and `headers`, the
    /// URL's password and query values, and arguments that look like credentials (a value
    /// after `--token`/`--api-key`/`--password` …, `NAME=value` with such a name, a value
    /// shaped like a known provider's key).
    pub fn redacted(&self) -> Self {
        let hide = |m: &BTreeMap<String, String>| {
            m.keys().map(|k| (k.clone(), REDACTED.to_owned())).collect()
        };
        let mut args = Vec::with_capacity(self.args.len());
        let mut prev: Option<&str> = None;
        for a in &self.args {
            args.push(redact_arg(prev, a));
            prev = Some(a);
        }
        Self {
            env: hide(&self.env),
            headers: hide(&self.headers),
            url: self.url.as_deref().map(redact_url),
            args,
            ..self.clone()
        }
    }
}

const REDACTED: &str = "[redacted]";

/// Whether a flag or variable name names a secret.
fn secret_name(name: &str) -> bool {
    let n = name.trim_start_matches('-').to_ascii_lowercase();
    [
        "token",
        "secret",
        "password",
        "passwd",
        "apikey",
        "api-key",
        "api_key",
        "auth",
        "credential",
        "private-key",
        "private_key",
        "access-key",
        "access_key",
    ]
    .iter()
    .any(|s| n.contains(s))
}

/// Whether a value has the shape of a well-known provider's secret.
fn secret_shape(v: &str) -> bool {
    [
        "sk-",
        "sk_",
        "ghp_",
        "gho_",
        "ghs_",
        "github_pat_",
        "xoxb-",
        "xoxp-",
        "xapp-",
        "glpat-",
        "hf_",
        "AKIA",
        "Bearer ",
    ]
    .iter()
    .any(|p| v.starts_with(p))
}

fn redact_arg(prev: Option<&str>, arg: &str) -> String {
    if let Some((name, _)) = arg.split_once('=')
        && secret_name(name)
    {
        return format!("{name}={REDACTED}");
    }
    if prev.is_some_and(|p| p.starts_with('-') && !p.contains('=') && secret_name(p))
        || secret_shape(arg)
    {
        return REDACTED.to_owned();
    }
    arg.to_owned()
}

/// `scheme://user:password@host/path?k=v` → `scheme://user:[redacted]@host/path?k=[redacted]`.
fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let base = match base.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
                    if userinfo.contains(':') {
                        format!("{scheme}://{user}:{REDACTED}@{host}{path}")
                    } else {
                        format!("{scheme}://{REDACTED}@{host}{path}")
                    }
                }
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    match query {
        None => base,
        Some(q) => {
            let pairs: Vec<String> = q
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) => format!("{k}={REDACTED}"),
                    None => p.to_owned(),
                })
                .collect();
            format!("{base}?{}", pairs.join("&"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_urls_and_arguments_are_hidden() {
        let s = McpServerSpec {
            name: "x".into(),
            url: Some("https://bob:hunter2@mcp.example.com/v1?api_key=sk-123&team=a".into()),
            ..Default::default()
        }
        .redacted();
        assert_eq!(
            s.url.as_deref(),
            Some("https://bob:[redacted]@mcp.example.com/v1?api_key=[redacted]&team=[redacted]")
        );
        let s = McpServerSpec {
            name: "x".into(),
            command: Some("npx".into()),
            args: [
                "-y",
                "@x/server",
                "--token",
                "abc123",
                "--api-key=k",
                "GITHUB_TOKEN=ghp_x",
                "ghp_alone",
                "--port",
                "8080",
                "/srv/data",
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        }
        .redacted();
        assert_eq!(
            s.args,
            [
                "-y",
                "@x/server",
                "--token",
                "[redacted]",
                "--api-key=[redacted]",
                "GITHUB_TOKEN=[redacted]",
                "[redacted]",
                "--port",
                "8080",
                "/srv/data",
            ]
        );
        assert_eq!(redact_url("http://h:1/mcp"), "http://h:1/mcp");
    }
}
