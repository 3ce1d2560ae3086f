//! RocksDB's snapshot image: the files of a checkpoint in one archive file,
//! written and read as streams so no image is ever held in memory.
//!
//! Layout: the magic `LODEIMG` and a format byte (1); per file a tag byte
//! (1), its name (u16 length, UTF-8), its length (u64) and its contents;
//! a tag byte 0; then the SHA-256 of every byte before it. All integers are
//! big-endian. Unpacking checks every name and length against what is left
//! of the file and the digest at the end, so a truncated, padded or altered
//! image is refused.

use std::fs;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use crate::error::EngineError;

const MAGIC: &[u8; 8] = b"LODEIMG\x01";
const TAG_FILE: u8 = 1;
const TAG_END: u8 = 0;
const DIGEST_BYTES: u64 = 32;
/// Most files an image may hold; a checkpoint of a live database has a
/// few dozen.
const FILES_MAX: usize = 100_000;
/// Longest file name in an image (RocksDB names its files briefly).
const NAME_BYTES_MAX: usize = 255;
const COPY_BUFFER_BYTES: usize = 256 * 1024;
/// Bytes of an archive written between two syncs of it. One sync at the
/// end of a 150 MiB image made the member's synced log appends, queued
/// behind that writeback in the file system's journal, wait for all of it.
const ARCHIVE_BYTES_PER_SYNC: u64 = 4 << 20;
const _: () = assert!(ARCHIVE_BYTES_PER_SYNC >= COPY_BUFFER_BYTES as u64);

fn io_context(path: &Path, action: &str) -> impl FnOnce(std::io::Error) -> EngineError {
    let context = format!("{action} {}", path.display());
    move |error| EngineError::io(context, error)
}

fn corrupt(detail: impl std::fmt::Display) -> EngineError {
    EngineError::corrupt("snapshot image", detail)
}

/// A writer that hashes what passes through it.
struct Hashing<W> {
    inner: W,
    digest: ring::digest::Context,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(data)?;
        self.digest.update(&data[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A file synced after every `ARCHIVE_BYTES_PER_SYNC` bytes written to it,
/// so that the dirty pages it leaves for the kernel stay few.
struct Syncing {
    file: fs::File,
    unsynced_bytes: u64,
}

impl Write for Syncing {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let written = self.file.write(data)?;
        self.unsynced_bytes += written as u64;
        if self.unsynced_bytes >= ARCHIVE_BYTES_PER_SYNC {
            self.file.sync_data()?;
            self.unsynced_bytes = 0;
        }
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// An archive as written: its length and its digest (its trailer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packed {
    pub bytes: u64,
    pub sha256: [u8; 32],
}

/// Writes the files of `directory` into a new archive at `archive`,
/// synced.
pub(crate) fn write(directory: &Path, archive: &Path) -> Result<Packed, EngineError> {
    let mut names = Vec::new();
    for item in fs::read_dir(directory).map_err(io_context(directory, "listing"))? {
        let item = item.map_err(io_context(directory, "listing"))?;
        names.push(item.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    let file = fs::File::create(archive).map_err(io_context(archive, "creating"))?;
    let mut out = Hashing {
        inner: BufWriter::with_capacity(
            COPY_BUFFER_BYTES,
            Syncing {
                file,
                unsynced_bytes: 0,
            },
        ),
        digest: ring::digest::Context::new(&ring::digest::SHA256),
    };
    let failed = io_context(archive, "writing");
    let written = (|| -> std::io::Result<[u8; 32]> {
        out.write_all(MAGIC)?;
        for name in &names {
            let path = directory.join(name);
            let mut contents = fs::File::open(&path)?;
            let length = contents.metadata()?.len();
            let name_length = u16::try_from(name.len()).map_err(|_| std::io::Error::other("a file name too long"))?;
            out.write_all(&[TAG_FILE])?;
            out.write_all(&name_length.to_be_bytes())?;
            out.write_all(name.as_bytes())?;
            out.write_all(&length.to_be_bytes())?;
            let copied = std::io::copy(&mut (&mut contents).take(length), &mut out)?;
            if copied != length {
                return Err(std::io::Error::other(format!("{name} shrank while it was packed")));
            }
        }
        out.write_all(&[TAG_END])?;
        let digest = out.digest.clone().finish();
        out.inner.write_all(digest.as_ref())?;
        out.inner.flush()?;
        let mut sha256 = [0u8; DIGEST_BYTES as usize];
        sha256.copy_from_slice(digest.as_ref());
        Ok(sha256)
    })();
    let sha256 = written.map_err(failed)?;
    let file = out
        .inner
        .into_inner()
        .map_err(|error| EngineError::io("flushing an image", error.into_error()))?
        .file;
    file.sync_all().map_err(io_context(archive, "syncing"))?;
    let bytes = file
        .metadata()
        .map_err(io_context(archive, "reading the length of"))?
        .len();
    Ok(Packed { bytes, sha256 })
}

/// A reader that hashes and counts what it reads.
struct Counted<R> {
    inner: R,
    digest: ring::digest::Context,
    read: u64,
}

impl<R: Read> Counted<R> {
    fn exact(&mut self, buffer: &mut [u8]) -> Result<(), EngineError> {
        self.inner
            .read_exact(buffer)
            .map_err(|error| corrupt(format!("ends early at byte {}: {error}", self.read)))?;
        self.digest.update(buffer);
        self.read += buffer.len() as u64;
        Ok(())
    }

    fn byte(&mut self) -> Result<u8, EngineError> {
        let mut buffer = [0u8; 1];
        self.exact(&mut buffer)?;
        Ok(buffer[0])
    }

    fn u16(&mut self) -> Result<u16, EngineError> {
        let mut buffer = [0u8; 2];
        self.exact(&mut buffer)?;
        Ok(u16::from_be_bytes(buffer))
    }

    fn u64(&mut self) -> Result<u64, EngineError> {
        let mut buffer = [0u8; 8];
        self.exact(&mut buffer)?;
        Ok(u64::from_be_bytes(buffer))
    }
}

/// Where the files of an archive being read go, one after another.
trait Unpacked {
    /// Called once, after the archive's magic was read.
    fn start(&mut self) -> Result<(), EngineError>;
    fn create(&mut self, name: &str) -> Result<(), EngineError>;
    fn append(&mut self, contents: &[u8]) -> Result<(), EngineError>;
    fn finish_file(&mut self) -> Result<(), EngineError>;
}

/// Files written into a fresh directory, each synced.
struct IntoDirectory<'a> {
    directory: &'a Path,
    file: Option<(fs::File, std::path::PathBuf)>,
}

impl Unpacked for IntoDirectory<'_> {
    fn start(&mut self) -> Result<(), EngineError> {
        if self.directory.exists() {
            fs::remove_dir_all(self.directory).map_err(io_context(self.directory, "removing"))?;
        }
        fs::create_dir_all(self.directory).map_err(io_context(self.directory, "creating"))
    }

    fn create(&mut self, name: &str) -> Result<(), EngineError> {
        let path = self.directory.join(name);
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io_context(&path, "creating"))?;
        self.file = Some((file, path));
        Ok(())
    }

    fn append(&mut self, contents: &[u8]) -> Result<(), EngineError> {
        match &mut self.file {
            Some((file, path)) => file.write_all(contents).map_err(io_context(path, "writing")),
            None => Err(corrupt("contents outside a file")),
        }
    }

    fn finish_file(&mut self) -> Result<(), EngineError> {
        match self.file.take() {
            Some((file, path)) => file.sync_all().map_err(io_context(&path, "syncing")),
            None => Ok(()),
        }
    }
}

/// Files kept in memory, in the archive's order.
#[derive(Default)]
struct IntoMemory {
    files: Vec<(String, Vec<u8>)>,
}

impl Unpacked for IntoMemory {
    fn start(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    fn create(&mut self, name: &str) -> Result<(), EngineError> {
        self.files.push((name.to_owned(), Vec::new()));
        Ok(())
    }

    fn append(&mut self, contents: &[u8]) -> Result<(), EngineError> {
        match self.files.last_mut() {
            Some((_, file)) => {
                file.extend_from_slice(contents);
                Ok(())
            }
            None => Err(corrupt("contents outside a file")),
        }
    }

    fn finish_file(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

/// Writes the files of the archive at `archive` into a fresh `directory`,
/// synced, after checking every name, length and the digest.
pub(crate) fn unpack(archive: &Path, directory: &Path) -> Result<(), EngineError> {
    let file = fs::File::open(archive).map_err(io_context(archive, "opening"))?;
    let total = file
        .metadata()
        .map_err(io_context(archive, "reading the length of"))?
        .len();
    unpack_from(file, total, directory).map(drop)
}

/// Writes the files of the archive of `total` bytes that `archive` reads
/// into a fresh `directory`, synced, after checking every name, length
/// and the digest, which it answers. Reads no byte past `total`.
pub(crate) fn unpack_from(archive: impl Read, total: u64, directory: &Path) -> Result<[u8; 32], EngineError> {
    let digest = read_archive(archive, total, &mut IntoDirectory { directory, file: None })?;
    fs::File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(io_context(directory, "syncing"))?;
    Ok(digest)
}

/// The files of an archive held in memory, in its order, checked as
/// `unpack` checks them. For tools and the fuzz target.
pub fn read_files(archive: &[u8]) -> Result<Vec<(String, Vec<u8>)>, EngineError> {
    let mut files = IntoMemory::default();
    read_archive(archive, archive.len() as u64, &mut files)?;
    Ok(files.files)
}

/// Reads an archive of `total` bytes into `unpacked`, checking the magic,
/// every tag, name and length, that no name repeats, and the digest.
fn read_archive(archive: impl Read, total: u64, unpacked: &mut dyn Unpacked) -> Result<[u8; 32], EngineError> {
    let mut input = Counted {
        inner: BufReader::with_capacity(COPY_BUFFER_BYTES, archive.take(total)),
        digest: ring::digest::Context::new(&ring::digest::SHA256),
        read: 0,
    };
    let mut magic = [0u8; 8];
    input.exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(corrupt("does not start with a Lode image header"));
    }
    unpacked.start()?;
    let mut names = std::collections::BTreeSet::new();
    loop {
        match input.byte()? {
            TAG_END => break,
            TAG_FILE => {}
            other => return Err(corrupt(format!("tag {other} at byte {}", input.read - 1))),
        }
        if names.len() >= FILES_MAX {
            return Err(corrupt(format!("more than {FILES_MAX} files")));
        }
        let name = read_file(&mut input, total, unpacked)?;
        if !names.insert(name.clone()) {
            return Err(corrupt(format!("file {name:?} twice")));
        }
    }
    let expected = input.digest.clone().finish();
    let mut stored = [0u8; DIGEST_BYTES as usize];
    input
        .inner
        .read_exact(&mut stored)
        .map_err(|error| corrupt(format!("no digest at its end: {error}")))?;
    if stored.as_slice() != expected.as_ref() {
        return Err(corrupt("its digest does not match its contents"));
    }
    if input.read + DIGEST_BYTES != total {
        return Err(corrupt(format!(
            "{} bytes follow its digest",
            total.saturating_sub(input.read + DIGEST_BYTES)
        )));
    }
    Ok(stored)
}

/// Reads one file's name, length and contents into `unpacked`; answers
/// its name.
fn read_file<R: Read>(input: &mut Counted<R>, total: u64, unpacked: &mut dyn Unpacked) -> Result<String, EngineError> {
    let name_length = usize::from(input.u16()?);
    if name_length == 0 || name_length > NAME_BYTES_MAX {
        return Err(corrupt(format!("a file name of {name_length} bytes")));
    }
    let mut name = vec![0u8; name_length];
    input.exact(&mut name)?;
    let name = String::from_utf8(name).map_err(|_| corrupt("a file name that is not UTF-8"))?;
    if name.contains('/') || name.contains('\0') || name == "." || name == ".." {
        return Err(corrupt(format!("file name {name:?}")));
    }
    let length = input.u64()?;
    let left = total.saturating_sub(input.read + DIGEST_BYTES);
    if length > left {
        return Err(corrupt(format!("{name} claims {length} bytes but {left} are left")));
    }
    unpacked.create(&name)?;
    let mut buffer = vec![0u8; COPY_BUFFER_BYTES.min(length as usize)];
    let mut remaining = length;
    while remaining > 0 {
        let chunk = remaining.min(COPY_BUFFER_BYTES as u64) as usize;
        input.exact(&mut buffer[..chunk])?;
        unpacked.append(&buffer[..chunk])?;
        remaining -= chunk as u64;
    }
    unpacked.finish_file()?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directory_with(files: &[(&str, &[u8])]) -> Result<tempfile::TempDir, Box<dyn std::error::Error>> {
        let directory = tempfile::tempdir()?;
        for (name, contents) in files {
            fs::write(directory.path().join(name), contents)?;
        }
        Ok(directory)
    }

    #[test]
    fn an_archive_unpacks_to_the_files_it_was_written_from() -> Result<(), Box<dyn std::error::Error>> {
        let big = vec![5u8; 3 * COPY_BUFFER_BYTES + 7];
        let source = directory_with(&[("a", b"first"), ("b.sst", &big), ("empty", b"")])?;
        let scratch = tempfile::tempdir()?;
        let archive = scratch.path().join("image");
        let packed = write(source.path(), &archive)?;
        assert_eq!(packed.bytes, fs::metadata(&archive)?.len());
        let bytes = fs::read(&archive)?;
        assert_eq!(packed.sha256.as_slice(), &bytes[bytes.len() - 32..]);
        let target = scratch.path().join("unpacked");
        unpack(&archive, &target)?;
        assert_eq!(fs::read(target.join("a"))?, b"first");
        assert_eq!(fs::read(target.join("b.sst"))?, big);
        assert_eq!(fs::read(target.join("empty"))?, b"");
        Ok(())
    }

    #[test]
    fn a_truncated_padded_or_altered_archive_is_refused() -> Result<(), Box<dyn std::error::Error>> {
        let source = directory_with(&[("a", b"first"), ("b", &[9u8; 1000])])?;
        let scratch = tempfile::tempdir()?;
        let archive = scratch.path().join("image");
        write(source.path(), &archive)?;
        let good = fs::read(&archive)?;
        let mut altered = good.clone();
        altered[30] ^= 1;
        let mut padded = good.clone();
        padded.push(0);
        let mut huge_length = good.clone();
        // The first file's length field follows the magic, tag and name.
        huge_length[12..20].copy_from_slice(&u64::MAX.to_be_bytes());
        let cases = [
            ("truncated", good[..good.len() / 2].to_vec()),
            ("altered", altered),
            ("padded", padded),
            ("a length past the end", huge_length),
            ("empty", Vec::new()),
            ("not an image", vec![0xff; 64]),
        ];
        for (what, bytes) in cases {
            let bad = scratch.path().join("bad");
            fs::write(&bad, &bytes)?;
            let refused = unpack(&bad, &scratch.path().join("target"));
            assert!(refused.is_err(), "a {what} image was unpacked");
        }
        Ok(())
    }
}
