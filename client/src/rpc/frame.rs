//! Length-prefixed frames: a 4-byte big-endian length, then that many
//! bytes.
//!
//! A frame longer than the connection's limit ends the connection before
//! any of it is buffered, and the buffer grows only with bytes that have
//! arrived: a peer announcing a large frame gets no memory for bytes it
//! has not sent (a general length-delimited codec reserves the whole
//! announced length at once).

use std::io;

use tokio_util::bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

const LENGTH_BYTES: usize = 4;

/// Frames of at most `frame_bytes_max` bytes each way.
#[derive(Clone, Copy, Debug)]
pub struct FrameCodec {
    frame_bytes_max: usize,
}

impl FrameCodec {
    pub fn new(frame_bytes_max: usize) -> Self {
        Self { frame_bytes_max }
    }

    fn too_large(&self, length: usize) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "a frame of {length} bytes is over this connection's limit of {} bytes (frame_bytes_max)",
                self.frame_bytes_max
            ),
        )
    }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = io::Error;

    fn decode(&mut self, source: &mut BytesMut) -> Result<Option<BytesMut>, io::Error> {
        if source.len() < LENGTH_BYTES {
            return Ok(None);
        }
        let mut length_bytes = [0u8; LENGTH_BYTES];
        length_bytes.copy_from_slice(&source[..LENGTH_BYTES]);
        let length = u32::from_be_bytes(length_bytes) as usize;
        if length > self.frame_bytes_max {
            return Err(self.too_large(length));
        }
        if source.len() < LENGTH_BYTES + length {
            // Wait for more bytes; the reader grows the buffer as they come.
            return Ok(None);
        }
        source.advance(LENGTH_BYTES);
        Ok(Some(source.split_to(length)))
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = io::Error;

    fn encode(&mut self, frame: Bytes, destination: &mut BytesMut) -> Result<(), io::Error> {
        if frame.len() > self.frame_bytes_max {
            return Err(self.too_large(frame.len()));
        }
        let length = u32::try_from(frame.len()).map_err(|_| self.too_large(frame.len()))?;
        destination.reserve(LENGTH_BYTES + frame.len());
        destination.put_u32(length);
        destination.extend_from_slice(&frame);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_an_oversized_announcement_is_refused_unbuffered() {
        let mut codec = FrameCodec::new(16);
        let mut buffer = BytesMut::new();
        codec.encode(Bytes::from_static(b"hello"), &mut buffer).expect("encode");
        assert_eq!(&buffer[..], b"\0\0\0\x05hello");
        assert_eq!(
            codec.decode(&mut buffer).expect("decode").as_deref(),
            Some(&b"hello"[..])
        );

        // Half a frame: nothing yet, and nothing reserved beyond what came.
        let mut partial = BytesMut::from(&b"\0\0\0\x0a12345"[..]);
        let capacity = partial.capacity();
        assert!(codec.decode(&mut partial).expect("partial").is_none());
        assert_eq!(partial.capacity(), capacity);

        let mut huge = BytesMut::from(&b"\x05\0\0\0"[..]);
        let error = codec.decode(&mut huge).expect_err("over the limit");
        assert!(error.to_string().contains("frame_bytes_max"), "{error}");
        assert!(codec.encode(Bytes::from(vec![0; 17]), &mut BytesMut::new()).is_err());
    }
}
