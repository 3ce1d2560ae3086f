//! The backup file `lode snapshot save` writes and `lode snapshot restore`
//! reads: a header naming what the image is, then the member's state image
//! (RocksDB's snapshot archive), streamed.
//!
//! Layout: the magic `LODEBAK` and a format byte (1); the header's length
//! (u32, big-endian), the header (bincode) and the SHA-256 of the header;
//! then exactly `image_bytes` bytes of image, whose own trailer is the
//! SHA-256 the header names. Nothing follows the image. The SDK writes the
//! file and the server never sees it; restore checks the header, every
//! byte of the image and its length before the target directory exists.

use std::io::Read;

use serde::{Deserialize, Serialize};

/// The first bytes of every backup file; the last one is the format.
pub const BACKUP_MAGIC: &[u8; 8] = b"LODEBAK\x01";
/// The header format this build writes and reads.
pub const BACKUP_FORMAT_VERSION: u32 = 1;
/// Longest header: a few hundred bytes plus the membership's addresses.
pub const BACKUP_HEADER_BYTES_MAX: usize = 1 << 20;
/// Most bytes one `backup_read` call answers, well inside a frame.
pub const BACKUP_CHUNK_BYTES_MAX: u32 = 1 << 20;
const _: () = assert!((BACKUP_CHUNK_BYTES_MAX as usize) < crate::limits::REQUEST_BYTES_MAX);

/// What an image holds, counted from the image itself when it was taken;
/// restore counts again and refuses an image that disagrees.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageCounts {
    /// Entries of key-value namespaces (Deno KV's included).
    pub kv_entries: u64,
    /// State API values (namespaces `state:<scope>`).
    pub state_values: u64,
    /// Bytes of the stored keys and values of both kinds above.
    pub entry_bytes: u64,
    /// Entries with an expiry time.
    pub expiring_entries: u64,
    /// Held fenced leases.
    pub leases: u64,
    /// Queue messages waiting or claimed.
    pub queue_messages: u64,
    /// Session index records (a key written under a session).
    pub session_links: u64,
    /// Users, roles, bindings and tokens.
    pub auth_records: u64,
    /// Change-log events kept.
    pub change_events: u64,
    /// Dedup records (op ids remembered with their answers).
    pub dedup_records: u64,
}

/// Everything a backup file says about its image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupHeader {
    pub format_version: u32,
    /// The cluster the image was taken from.
    pub cluster_id: u128,
    /// The member that took it.
    pub taken_by: u64,
    /// The member's clock when it was taken.
    pub taken_at_micros: u64,
    /// The last log entry the image has applied (term, index): every
    /// version and change-log position in it is at most this index.
    pub last_log_term: u64,
    pub last_log_index: u64,
    /// The voters of the cluster it was taken from, by id and peer address.
    pub voters: Vec<(u64, String)>,
    pub counts: ImageCounts,
    /// Length of the image that follows the header.
    pub image_bytes: u64,
    /// The image's own digest (its trailer): SHA-256 of every image byte
    /// before its last 32.
    #[serde(with = "serde_bytes")]
    pub image_sha256: Vec<u8>,
}

/// The bytes that start a backup file: magic, length, header, its digest.
pub fn encode_header(header: &BackupHeader) -> Result<Vec<u8>, String> {
    let body = crate::binary::encode(header)?;
    let length = u32::try_from(body.len())
        .ok()
        .filter(|length| *length as usize <= BACKUP_HEADER_BYTES_MAX)
        .ok_or_else(|| format!("a backup header of {} bytes (backup_header_bytes_max)", body.len()))?;
    let mut out = BACKUP_MAGIC.to_vec();
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&crate::auth::sha256(&body));
    Ok(out)
}

/// Reads and checks the header at the start of `input`, which is left at
/// the first byte of the image. Answers the header and how many bytes it
/// took.
pub fn read_header(input: &mut impl Read) -> Result<(BackupHeader, u64), String> {
    let ends_early = |error: std::io::Error| format!("not a whole Lode backup: it ends in its header ({error})");
    let mut magic = [0u8; 8];
    input.read_exact(&mut magic).map_err(ends_early)?;
    if magic[..7] != BACKUP_MAGIC[..7] {
        return Err("not a Lode backup: it does not start with LODEBAK".to_owned());
    }
    if magic[7] != BACKUP_MAGIC[7] {
        return Err(format!(
            "a backup of format {}; this build reads format {}",
            magic[7], BACKUP_MAGIC[7]
        ));
    }
    let mut length = [0u8; 4];
    input.read_exact(&mut length).map_err(ends_early)?;
    let length = u32::from_be_bytes(length) as usize;
    if length > BACKUP_HEADER_BYTES_MAX {
        return Err(format!(
            "a backup header of {length} bytes is over {BACKUP_HEADER_BYTES_MAX} (backup_header_bytes_max)"
        ));
    }
    let mut body = vec![0u8; length];
    input.read_exact(&mut body).map_err(ends_early)?;
    let mut digest = [0u8; 32];
    input.read_exact(&mut digest).map_err(ends_early)?;
    if !crate::auth::constant_time_equal(&digest, &crate::auth::sha256(&body)) {
        return Err("the backup's header is damaged: its digest does not match".to_owned());
    }
    let header: BackupHeader =
        crate::binary::decode(&body).map_err(|error| format!("the backup's header does not decode: {error}"))?;
    if header.format_version != BACKUP_FORMAT_VERSION {
        return Err(format!(
            "a backup header of version {}; this build reads version {BACKUP_FORMAT_VERSION}",
            header.format_version
        ));
    }
    if header.image_sha256.len() != 32 {
        return Err("the backup's header names no SHA-256 of its image".to_owned());
    }
    Ok((header, (8 + 4 + length + 32) as u64))
}

/// Checks an image as it streams past: its length and its trailer against
/// the header, and the trailer against every byte before it.
pub struct ImageCheck {
    expected_bytes: u64,
    expected_sha256: Vec<u8>,
    seen: u64,
    digest: ring::digest::Context,
    trailer: Vec<u8>,
}

impl ImageCheck {
    pub fn new(header: &BackupHeader) -> Self {
        Self {
            expected_bytes: header.image_bytes,
            expected_sha256: header.image_sha256.clone(),
            seen: 0,
            digest: ring::digest::Context::new(&ring::digest::SHA256),
            trailer: Vec::with_capacity(32),
        }
    }

    /// Takes the next bytes of the image.
    pub fn update(&mut self, bytes: &[u8]) -> Result<(), String> {
        let end = self.seen.saturating_add(bytes.len() as u64);
        if end > self.expected_bytes {
            return Err(format!(
                "the image is longer than the {} bytes its header says",
                self.expected_bytes
            ));
        }
        let body_end = self.expected_bytes.saturating_sub(32);
        let in_body = body_end.saturating_sub(self.seen).min(bytes.len() as u64) as usize;
        self.digest.update(&bytes[..in_body]);
        self.trailer.extend_from_slice(&bytes[in_body..]);
        self.seen = end;
        Ok(())
    }

    /// Whether the whole image arrived and is the one the header names.
    pub fn finish(self) -> Result<(), String> {
        if self.seen != self.expected_bytes {
            return Err(format!(
                "the image ended after {} of its {} bytes",
                self.seen, self.expected_bytes
            ));
        }
        let computed = self.digest.finish();
        if self.trailer != self.expected_sha256 || computed.as_ref() != self.trailer.as_slice() {
            return Err("the image's SHA-256 does not match its header".to_owned());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> BackupHeader {
        BackupHeader {
            format_version: BACKUP_FORMAT_VERSION,
            cluster_id: 7,
            taken_by: 2,
            taken_at_micros: 1_000,
            last_log_term: 3,
            last_log_index: 42,
            voters: vec![(1, "127.0.0.1:1".to_owned())],
            counts: ImageCounts {
                kv_entries: 5,
                ..ImageCounts::default()
            },
            image_bytes: 100,
            image_sha256: vec![9; 32],
        }
    }

    #[test]
    fn a_header_reads_back_and_leaves_the_input_at_the_image() -> Result<(), String> {
        let mut bytes = encode_header(&header())?;
        let header_bytes = bytes.len() as u64;
        bytes.extend_from_slice(b"image");
        let mut input = bytes.as_slice();
        let (read, length) = read_header(&mut input)?;
        assert_eq!(read, header());
        assert_eq!(length, header_bytes);
        assert_eq!(input, b"image");
        Ok(())
    }

    #[test]
    fn an_image_check_takes_the_image_and_nothing_else() -> Result<(), String> {
        let body = vec![3u8; 1000];
        let mut image = body.clone();
        image.extend_from_slice(&crate::auth::sha256(&body));
        let header = BackupHeader {
            image_bytes: image.len() as u64,
            image_sha256: crate::auth::sha256(&body).to_vec(),
            ..header()
        };
        let mut check = ImageCheck::new(&header);
        for chunk in image.chunks(7) {
            check.update(chunk)?;
        }
        check.finish()?;
        let mut short = ImageCheck::new(&header);
        short.update(&image[..500])?;
        assert!(short.finish().is_err_and(|error| error.contains("ended after 500")));
        let mut long = ImageCheck::new(&header);
        long.update(&image)?;
        assert!(long.update(b"x").is_err());
        let mut altered = image.clone();
        altered[10] ^= 1;
        let mut damaged = ImageCheck::new(&header);
        damaged.update(&altered)?;
        assert!(damaged.finish().is_err_and(|error| error.contains("SHA-256")));
        Ok(())
    }

    #[test]
    fn a_damaged_or_foreign_header_is_refused() -> Result<(), String> {
        let good = encode_header(&header())?;
        let mut altered = good.clone();
        altered[20] ^= 1;
        let mut newer = good.clone();
        newer[7] = 2;
        let mut huge = good.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        let cases = [
            ("altered", altered, "digest"),
            ("newer", newer, "format 2"),
            ("huge", huge, "backup_header_bytes_max"),
            ("truncated", good[..good.len() - 1].to_vec(), "ends in its header"),
            ("foreign", b"PK\x03\x04 not a backup".to_vec(), "LODEBAK"),
        ];
        for (what, bytes, expected) in cases {
            let refused = read_header(&mut bytes.as_slice()).err().unwrap_or_default();
            assert!(refused.contains(expected), "{what}: {refused}");
        }
        Ok(())
    }
}
