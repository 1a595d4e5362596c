//! Decoding of the AWS event-stream binary framing that Bedrock's `converse-stream` answers in.
//!
//! A message is `total_len: u32 | headers_len: u32 | prelude_crc: u32 | headers | payload |
//! message_crc: u32`, big-endian, both checksums CRC-32 (IEEE). Headers are
//! `name_len: u8 | name | type: u8 | value`; only string values (type 7) are kept, the others are
//! skipped by their encoded length. Frames arrive split across arbitrary HTTP chunks, so the
//! decoder buffers bytes and yields each message once it is complete.

use crate::limits::MAX_BEDROCK_EVENT_BYTES;

/// Bytes of the prelude (two lengths and their checksum) and of the trailing message checksum.
const PRELUDE_LEN: usize = 12;
const MESSAGE_CRC_LEN: usize = 4;

/// One decoded message: its string headers and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub headers: Vec<(String, String)>,
    pub payload: Vec<u8>,
}

impl Message {
    /// The value of a string header, such as `:event-type`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Why bytes could not be decoded as event-stream messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("event-stream frame length {0} is not between 16 bytes and 16 MiB")]
    BadLength(usize),
    #[error("event-stream prelude checksum mismatch")]
    PreludeChecksum,
    #[error("event-stream message checksum mismatch")]
    MessageChecksum,
    #[error("event-stream headers are malformed")]
    BadHeaders,
}

/// Accumulates stream bytes and splits them into messages.
#[derive(Debug, Default)]
pub struct Decoder {
    buffer: Vec<u8>,
}

impl Decoder {
    /// Appends bytes received from the network.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// Whether bytes of an unfinished message are waiting: at the end of the stream that means
    /// the connection dropped mid-message.
    pub fn has_partial(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// The next complete message, `Ok(None)` when more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<Message>, FrameError> {
        if self.buffer.len() < PRELUDE_LEN {
            return Ok(None);
        }
        let total_len = read_u32(&self.buffer[0..4]) as usize;
        let headers_len = read_u32(&self.buffer[4..8]) as usize;
        if !(PRELUDE_LEN + MESSAGE_CRC_LEN..=MAX_BEDROCK_EVENT_BYTES).contains(&total_len)
            || headers_len > total_len - PRELUDE_LEN - MESSAGE_CRC_LEN
        {
            return Err(FrameError::BadLength(total_len));
        }
        if crc32fast::hash(&self.buffer[0..8]) != read_u32(&self.buffer[8..12]) {
            return Err(FrameError::PreludeChecksum);
        }
        if self.buffer.len() < total_len {
            return Ok(None);
        }
        let body_end = total_len - MESSAGE_CRC_LEN;
        if crc32fast::hash(&self.buffer[..body_end]) != read_u32(&self.buffer[body_end..total_len])
        {
            return Err(FrameError::MessageChecksum);
        }
        let headers_end = PRELUDE_LEN + headers_len;
        let headers = parse_headers(&self.buffer[PRELUDE_LEN..headers_end])?;
        let payload = self.buffer[headers_end..body_end].to_vec();
        self.buffer.drain(..total_len);
        Ok(Some(Message { headers, payload }))
    }
}

fn read_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// Header value types of the framing, by their type byte, and the fixed size of each
/// fixed-width one.
const TYPE_STRING: u8 = 7;
const TYPE_BYTES: u8 = 6;

fn fixed_value_len(value_type: u8) -> Option<usize> {
    match value_type {
        0 | 1 => Some(0), // booleans live in the type byte itself
        2 => Some(1),
        3 => Some(2),
        4 => Some(4),
        5 | 8 => Some(8), // i64 and timestamp
        9 => Some(16),    // UUID
        _ => None,
    }
}

fn parse_headers(mut bytes: &[u8]) -> Result<Vec<(String, String)>, FrameError> {
    let mut headers = Vec::new();
    while !bytes.is_empty() {
        let name_len = usize::from(bytes[0]);
        let name = bytes.get(1..1 + name_len).ok_or(FrameError::BadHeaders)?;
        let value_type = *bytes.get(1 + name_len).ok_or(FrameError::BadHeaders)?;
        let rest = &bytes[2 + name_len..];
        let (value, consumed) = match value_type {
            TYPE_STRING | TYPE_BYTES => {
                let len = rest.get(0..2).ok_or(FrameError::BadHeaders)?;
                let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
                let value = rest.get(2..2 + len).ok_or(FrameError::BadHeaders)?;
                (Some(value), 2 + len)
            }
            other => (None, fixed_value_len(other).ok_or(FrameError::BadHeaders)?),
        };
        if rest.len() < consumed {
            return Err(FrameError::BadHeaders);
        }
        if let (TYPE_STRING, Some(value)) = (value_type, value) {
            let name = String::from_utf8(name.to_vec()).map_err(|_| FrameError::BadHeaders)?;
            let value = String::from_utf8(value.to_vec()).map_err(|_| FrameError::BadHeaders)?;
            headers.push((name, value));
        }
        bytes = &rest[consumed..];
    }
    Ok(headers)
}

/// Encodes one message with string headers, as Bedrock frames its events. pen only decodes;
/// this is the other half for fake Converse servers in tests, so the framing is written once.
///
/// # Panics
/// If a header name is over 255 bytes or a value over 65,535, which the framing cannot carry.
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut header_bytes = Vec::new();
    for (name, value) in headers {
        header_bytes.push(u8::try_from(name.len()).expect("header name under 256 bytes"));
        header_bytes.extend_from_slice(name.as_bytes());
        header_bytes.push(TYPE_STRING);
        let value_len = u16::try_from(value.len()).expect("header value under 64 KiB");
        header_bytes.extend_from_slice(&value_len.to_be_bytes());
        header_bytes.extend_from_slice(value.as_bytes());
    }
    let total = PRELUDE_LEN + header_bytes.len() + payload.len() + MESSAGE_CRC_LEN;
    let mut message = Vec::with_capacity(total);
    message.extend_from_slice(&(total as u32).to_be_bytes());
    message.extend_from_slice(&(header_bytes.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&message);
    message.extend_from_slice(&prelude_crc.to_be_bytes());
    message.extend_from_slice(&header_bytes);
    message.extend_from_slice(payload);
    let message_crc = crc32fast::hash(&message);
    message.extend_from_slice(&message_crc.to_be_bytes());
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_split_across_chunks_decode_once_complete() {
        let first = encode(
            &[(":event-type", "messageStart")],
            br#"{"role":"assistant"}"#,
        );
        let second = encode(
            &[(":event-type", "messageStop")],
            br#"{"stopReason":"end_turn"}"#,
        );
        let bytes = [first, second].concat();
        let mut decoder = Decoder::default();
        let mut seen = Vec::new();
        // One byte at a time is the worst split the network can produce.
        for byte in &bytes {
            decoder.push(std::slice::from_ref(byte));
            while let Some(message) = decoder.next_message().expect("valid framing") {
                seen.push(message);
            }
        }
        assert!(!decoder.has_partial());
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].header(":event-type"), Some("messageStart"));
        assert_eq!(seen[1].payload, br#"{"stopReason":"end_turn"}"#);
    }

    #[test]
    fn non_string_headers_are_skipped() {
        // A bool-true header (type 0, no value) and an i32 header (type 4) before a string one.
        let mut headers = vec![4u8];
        headers.extend_from_slice(b"flag");
        headers.push(0);
        headers.push(3);
        headers.extend_from_slice(b"num");
        headers.push(4);
        headers.extend_from_slice(&7i32.to_be_bytes());
        headers.push(5);
        headers.extend_from_slice(b":name");
        headers.push(TYPE_STRING);
        headers.extend_from_slice(&2u16.to_be_bytes());
        headers.extend_from_slice(b"ok");
        assert_eq!(
            parse_headers(&headers),
            Ok(vec![(":name".to_string(), "ok".to_string())])
        );
        assert_eq!(
            parse_headers(&headers[..headers.len() - 1]),
            Err(FrameError::BadHeaders)
        );
    }

    #[test]
    fn corrupt_frames_are_errors() {
        let good = encode(&[(":event-type", "messageStop")], b"{}");
        let mut bad_payload = good.clone();
        let last_payload_byte = bad_payload.len() - MESSAGE_CRC_LEN - 1;
        bad_payload[last_payload_byte] ^= 1;
        let mut bad_prelude = good.clone();
        bad_prelude[8] ^= 1;
        let not_framing = b"<html>Service Unavailable</html>".to_vec();
        for (bytes, expected) in [
            (bad_payload, FrameError::MessageChecksum),
            (bad_prelude, FrameError::PreludeChecksum),
            (not_framing, FrameError::BadLength(0x3c68_746d)),
        ] {
            let mut decoder = Decoder::default();
            decoder.push(&bytes);
            assert_eq!(decoder.next_message(), Err(expected));
        }
    }
}
