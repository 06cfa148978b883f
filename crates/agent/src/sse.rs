//! Incremental parser for the `data:` lines of a provider's event stream.
//!
//! Written by hand: providers only use `data:` lines (and comments), and the parser must
//! tell a stream that ended cleanly from one cut mid-way, which we check ourselves.

use crate::provider::ProviderError;
use crate::provider::http::root_cause;

/// Splits a byte stream into SSE `data` payloads.
#[derive(Default)]
pub(crate) struct DataLines {
    buf: Vec<u8>,
    data: Option<String>,
}

impl DataLines {
    /// Feeds bytes; returns complete `data` payloads (one per event).
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8_lossy(&line);
            if line.is_empty() {
                if let Some(d) = self.data.take() {
                    out.push(d);
                }
            } else if let Some(rest) = line.strip_prefix("data:") {
                let rest = rest.strip_prefix(' ').unwrap_or(rest);
                match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(rest);
                    }
                    None => self.data = Some(rest.to_string()),
                }
            }
            // Comments (":"), "event:", "id:" and "retry:" lines carry nothing we use.
        }
        out
    }

    /// Whatever remains when the stream ends (a last event without its blank line).
    pub(crate) fn finish(&mut self) -> Option<String> {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let _ = self.push(&rest);
            let _ = self.push(b"\n");
        }
        self.data.take()
    }
}

/// The `data` payloads of a provider's streamed response, batch by batch as bytes arrive:
/// the one read loop of every provider. A cancel, the idle timeout and a connection cut off
/// mid-stream are each the same [`ProviderError`] whatever the provider; what the payloads
/// mean is the provider's business.
pub(crate) struct Payloads {
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    lines: DataLines,
    idle: std::time::Duration,
    ended: bool,
}

impl Payloads {
    /// Reads `resp`'s body; silence for `idle` fails it.
    pub(crate) fn new(resp: reqwest::Response, idle: std::time::Duration) -> Self {
        Self {
            stream: Box::pin(resp.bytes_stream()),
            lines: DataLines::default(),
            idle,
            ended: false,
        }
    }

    /// The payloads completed by the next bytes (possibly none); at the end of the body, the
    /// last one left unterminated, then `None`. `redact` cleans a transport error's words.
    pub(crate) async fn next(
        &mut self,
        cancel: &tokio_util::sync::CancellationToken,
        redact: &(dyn Fn(&str) -> String + Sync),
    ) -> Result<Option<Vec<String>>, ProviderError> {
        use futures::StreamExt;
        if self.ended {
            return Ok(None);
        }
        let next = tokio::select! {
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            n = tokio::time::timeout(self.idle, self.stream.next()) => n,
        };
        match next {
            Err(_) => Err(ProviderError::Idle(self.idle.as_secs())),
            Ok(None) => {
                self.ended = true;
                Ok(Some(self.lines.finish().into_iter().collect()))
            }
            Ok(Some(Err(e))) => Err(ProviderError::CutOff(format!(
                ": {}",
                redact(&root_cause(&e))
            ))),
            Ok(Some(Ok(bytes))) => Ok(Some(self.lines.push(&bytes))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_anywhere() {
        let input = b"data: {\"a\":1}\n\n: keep-alive\r\ndata: [DONE]\r\n\r\n";
        for cut in 0..input.len() {
            let mut p = DataLines::default();
            let mut got = p.push(&input[..cut]);
            got.extend(p.push(&input[cut..]));
            assert_eq!(
                got,
                vec!["{\"a\":1}".to_string(), "[DONE]".to_string()],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn unterminated_last_event() {
        let mut p = DataLines::default();
        assert!(p.push(b"data: x").is_empty());
        assert_eq!(p.finish().as_deref(), Some("x"));
    }
}
