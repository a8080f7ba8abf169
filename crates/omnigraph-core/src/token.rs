//! Opaque tokens handed to callers: page tokens and change-feed cursors.
//!
//! A token is its value as JSON, followed by a checksum of that JSON, in
//! hex. The checksum turns an edited or truncated token into a refusal
//! instead of a different but well-formed request; tokens carry no secret,
//! so what a token binds (a graph, a branch, a filter) is checked by the
//! reader against the request too.

use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

/// Longest token accepted, in characters.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

/// Checksum bytes appended to a token's JSON.
const CHECK_LEN: usize = 8;

fn check(json: &[u8]) -> [u8; CHECK_LEN] {
    let digest = Sha256::digest(json);
    let mut out = [0u8; CHECK_LEN];
    out.copy_from_slice(&digest[..CHECK_LEN]);
    out
}

/// `value` as a token.
pub fn encode<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    let mut bytes = serde_json::to_vec(value)?;
    let sum = check(&bytes);
    bytes.extend_from_slice(&sum);
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The value `text` encodes, or `None` for anything [`encode`] did not make
/// (wrong length, not hex, a checksum that does not match, another shape).
pub fn decode<T: DeserializeOwned>(text: &str) -> Option<T> {
    if !text.len().is_multiple_of(2) || text.len() > MAX_TOKEN_LEN {
        return None;
    }
    let bytes: Vec<u8> =
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect::<Option<_>>()?;
    let split = bytes.len().checked_sub(CHECK_LEN)?;
    let (json, sum) = bytes.split_at(split);
    if check(json) != sum {
        return None;
    }
    serde_json::from_slice(json).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct T {
        a: String,
        n: u32,
    }

    #[test]
    fn tokens_round_trip_and_refuse_edits() {
        let t = T { a: "main".into(), n: 7 };
        let text = encode(&t).expect("encode");
        assert_eq!(decode::<T>(&text), Some(t));
        // Flip one hex digit anywhere: the checksum no longer matches.
        for i in [0, text.len() / 2, text.len() - 1] {
            let mut edited = text.clone().into_bytes();
            edited[i] = if edited[i] == b'0' { b'1' } else { b'0' };
            let edited = String::from_utf8(edited).expect("ascii");
            assert_eq!(decode::<T>(&edited), None, "edit at {i}");
        }
        for bad in ["", "zz", "abc", &text[..text.len() - 2], "7b7d"] {
            assert_eq!(decode::<T>(bad), None, "{bad:?}");
        }
        // Another shape with a valid checksum is refused too.
        assert_eq!(decode::<T>(&encode(&serde_json::json!({"b": 1})).expect("encode")), None);
    }
}
