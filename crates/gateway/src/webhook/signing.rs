//! Signing and checking webhook requests: HMAC-SHA256 of `"<timestamp>.<raw body>"`, compared in
//! constant time, within a clock tolerance (see the module above for the scheme).

use super::*;

/// The raw HMAC-SHA256 of `"<timestamp>.<body>"`.
pub(crate) fn mac_bytes(secret: &str, timestamp: i64, body: &[u8]) -> Option<Vec<u8>> {
    // HMAC accepts keys of any length, so this never fails; `None` keeps it panic-free.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(secret.as_bytes()).ok()?;
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(mac.finalize().into_bytes().to_vec())
}

/// The `X-Switchboard-Signature` value for `body` sent at `timestamp`: `sha256=<hex>`.
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let digest = mac_bytes(secret, timestamp, body).unwrap_or_default();
    format!("sha256={}", hex::encode(digest))
}

/// Why an inbound request was refused.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A header is missing or malformed, or the signature does not match.
    #[error("missing or malformed signature")]
    BadSignature,
    /// Correctly signed, but the timestamp is more than the tolerance from now.
    #[error("timestamp outside the allowed window")]
    Stale,
}

/// The one value of header `name`, trimmed; several values or non-ASCII are malformed.
pub(crate) fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
) -> Result<&'a str, VerifyError> {
    let mut values = headers.get_all(name).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(VerifyError::BadSignature);
    };
    value
        .to_str()
        .map(str::trim)
        .map_err(|_| VerifyError::BadSignature)
}

/// Checks a request's signature headers against `body` and `secret`, and its timestamp
/// against `now` (unix seconds) ± `tolerance`. The signature is checked first, so
/// [`VerifyError::Stale`] is only reported for a genuinely signed (but old) request.
/// An empty secret verifies nothing.
pub fn verify(
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    if secret.is_empty() {
        return Err(VerifyError::BadSignature);
    }
    let ts_raw = single_header(headers, TIMESTAMP_HEADER)?;
    if ts_raw.is_empty() || ts_raw.len() > 18 || !ts_raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VerifyError::BadSignature);
    }
    let timestamp: i64 = ts_raw.parse().map_err(|_| VerifyError::BadSignature)?;
    let sig_raw = single_header(headers, SIGNATURE_HEADER)?;
    let sig_hex = sig_raw
        .strip_prefix("sha256=")
        .ok_or(VerifyError::BadSignature)?;
    if sig_hex.len() != 64 {
        return Err(VerifyError::BadSignature);
    }
    let given = hex::decode(sig_hex).map_err(|_| VerifyError::BadSignature)?;
    let expected = mac_bytes(secret, timestamp, body).ok_or(VerifyError::BadSignature)?;
    if !bool::from(expected.as_slice().ct_eq(given.as_slice())) {
        return Err(VerifyError::BadSignature);
    }
    if now.abs_diff(timestamp) > tolerance.as_secs() {
        return Err(VerifyError::Stale);
    }
    Ok(())
}
