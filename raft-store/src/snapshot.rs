//! Snapshots as they are stored and streamed: the record saved as the
//! current snapshot (openraft's meta), and the image, which openraft reads
//! in chunks to send and writes chunk by chunk as it receives. RocksDB's
//! image is a file, so no snapshot is ever held whole in memory; the
//! in-memory engine's is bytes, so simulations never touch the disk.
//!
//! An image is made only to be sent: the stored snapshot is a record of a
//! state that is on disk at least that far (`state_machine.rs`). An image
//! for a follower is taken as a checkpoint between two applies and packed
//! when openraft first reads it, on its replication task.

use std::future::Future;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use openraft::SnapshotMeta;

use crate::error::{decode, encode, EngineError};
use crate::type_config::{Member, NodeId};

/// What is stored beside the current snapshot's image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSnapshot {
    pub meta: SnapshotMeta<NodeId, Member>,
}

impl StoredSnapshot {
    pub fn to_bytes(&self) -> Result<Vec<u8>, EngineError> {
        encode("snapshot record", self)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, EngineError> {
        decode("snapshot record", bytes)
    }
}

/// A snapshot image: a file of RocksDB's packed image, the in-memory
/// engine's bytes, or a checkpoint not yet packed.
pub enum SnapshotImage {
    File {
        path: PathBuf,
        file: tokio::fs::File,
        /// Set on a received image: openraft drops, without a word, one it
        /// received whole but no longer needs, and its file goes with it.
        removed_on_drop: Option<RemovedOnDrop>,
    },
    Memory(Cursor<Vec<u8>>),
    Unpacked(UnpackedImage),
}

impl std::fmt::Debug for SnapshotImage {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotImage::File { path, .. } => write!(formatter, "SnapshotImage({})", path.display()),
            SnapshotImage::Memory(bytes) => write!(formatter, "SnapshotImage({} bytes)", bytes.get_ref().len()),
            SnapshotImage::Unpacked(_) => formatter.write_str("SnapshotImage(not yet packed)"),
        }
    }
}

/// Removes a file by name when dropped, unless kept.
#[derive(Debug)]
pub struct RemovedOnDrop {
    path: Option<PathBuf>,
}

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let Some(path) = self.path.take() else {
            return;
        };
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(file = %path.display(), %error, "could not remove an unused snapshot image"),
        }
    }
}

/// Packs a checkpoint into an image; blocks on the disk.
pub type PackImage = Box<dyn FnOnce() -> Result<SnapshotImage, EngineError> + Send + Sync>;

/// A checkpoint packed on a blocking thread when first read or sought, so
/// that the state machine's task, which openraft asks for the image between
/// two applies, never waits for a whole state to be written out.
pub struct UnpackedImage {
    pack: Option<PackImage>,
    packing: Option<tokio::task::JoinHandle<Result<SnapshotImage, EngineError>>>,
    /// A seek asked for before the image was packed, done once it is.
    seek: Option<std::io::SeekFrom>,
}

impl UnpackedImage {
    /// Packs on the calling thread, which may block: for an install that
    /// was handed this image directly (openraft's storage suite does).
    pub fn pack_now(mut self) -> Result<SnapshotImage, EngineError> {
        let pack = self.pack.take().ok_or_else(|| {
            EngineError::io(
                "packing a snapshot image",
                std::io::Error::other("the image is already being packed"),
            )
        })?;
        pack()
    }

    fn poll_packed(&mut self, context: &mut Context<'_>) -> Poll<std::io::Result<SnapshotImage>> {
        if let Some(pack) = self.pack.take() {
            self.packing = Some(tokio::task::spawn_blocking(pack));
        }
        let Some(packing) = &mut self.packing else {
            return Poll::Ready(Err(std::io::Error::other("packing the snapshot image failed earlier")));
        };
        let packed = ready!(Pin::new(packing).poll(context));
        self.packing = None;
        Poll::Ready(match packed {
            Ok(Ok(image)) => Ok(image),
            Ok(Err(error)) => Err(std::io::Error::other(format!("packing the snapshot image: {error}"))),
            Err(error) => Err(std::io::Error::other(format!("packing the snapshot image: {error}"))),
        })
    }
}

impl SnapshotImage {
    /// An image that `pack` writes when it is first read.
    pub fn unpacked(pack: PackImage) -> Self {
        SnapshotImage::Unpacked(UnpackedImage {
            pack: Some(pack),
            packing: None,
            seek: None,
        })
    }

    /// An image with nothing in it: what a build answers, since openraft
    /// 0.9 keeps only a built snapshot's meta (`core/sm/worker.rs`).
    pub fn empty() -> Self {
        SnapshotImage::Memory(Cursor::new(Vec::new()))
    }

    /// The image and its length, read through its handle (a packed
    /// image's name is already gone). Blocks on the disk.
    pub fn measured(self) -> Result<(Self, u64), EngineError> {
        match self {
            SnapshotImage::File { path, file, .. } => {
                let file = file.try_into_std().map_err(|_| {
                    EngineError::io(
                        format!("measuring {}", path.display()),
                        std::io::Error::other("an operation on the image is still in flight"),
                    )
                })?;
                let bytes = file
                    .metadata()
                    .map_err(|error| EngineError::io(format!("measuring {}", path.display()), error))?
                    .len();
                Ok((SnapshotImage::open_file(&path, file), bytes))
            }
            SnapshotImage::Memory(bytes) => {
                let length = bytes.get_ref().len() as u64;
                Ok((SnapshotImage::Memory(bytes), length))
            }
            SnapshotImage::Unpacked(unpacked) => unpacked.pack_now()?.measured(),
        }
    }

    /// Becomes the packed image once packing is done; a no-op for others.
    fn poll_packed(&mut self, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let SnapshotImage::Unpacked(unpacked) = self else {
            return Poll::Ready(Ok(()));
        };
        let packed = ready!(unpacked.poll_packed(context))?;
        let seek = unpacked.seek.take();
        *self = packed;
        if let Some(position) = seek {
            Pin::new(self).start_seek(position)?;
        }
        Poll::Ready(Ok(()))
    }

    /// Opens an image file for openraft to read or write.
    pub fn open_file(path: &Path, file: std::fs::File) -> Self {
        SnapshotImage::File {
            path: path.to_owned(),
            file: tokio::fs::File::from_std(file),
            removed_on_drop: None,
        }
    }

    /// Opens a file being received, removed by name when dropped unless
    /// [`Self::keep`] is called first.
    pub fn open_received(path: &Path, file: std::fs::File) -> Self {
        SnapshotImage::File {
            path: path.to_owned(),
            file: tokio::fs::File::from_std(file),
            removed_on_drop: Some(RemovedOnDrop {
                path: Some(path.to_owned()),
            }),
        }
    }

    /// Keeps a received image's file after it is dropped: it was saved
    /// with the snapshot's record.
    pub fn keep(&mut self) {
        if let SnapshotImage::File {
            removed_on_drop: Some(guard),
            ..
        } = self
        {
            guard.path = None;
        }
    }

    /// The file of a file image.
    pub fn path(&self) -> Option<&Path> {
        match self {
            SnapshotImage::File { path, .. } => Some(path),
            SnapshotImage::Memory(_) | SnapshotImage::Unpacked(_) => None,
        }
    }

    /// The bytes of a memory image.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            SnapshotImage::File { .. } | SnapshotImage::Unpacked(_) => None,
            SnapshotImage::Memory(bytes) => Some(bytes.get_ref()),
        }
    }
}

impl AsyncRead for SnapshotImage {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let image = self.get_mut();
        ready!(image.poll_packed(context))?;
        match image {
            SnapshotImage::File { file, .. } => Pin::new(file).poll_read(context, buffer),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).poll_read(context, buffer),
            SnapshotImage::Unpacked(_) => Poll::Ready(Err(std::io::Error::other("the image is not packed"))),
        }
    }
}

impl AsyncWrite for SnapshotImage {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            SnapshotImage::File { file, .. } => Pin::new(file).poll_write(context, data),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).poll_write(context, data),
            SnapshotImage::Unpacked(_) => Poll::Ready(Err(read_only())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            SnapshotImage::File { file, .. } => Pin::new(file).poll_flush(context),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).poll_flush(context),
            SnapshotImage::Unpacked(_) => Poll::Ready(Err(read_only())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            SnapshotImage::File { file, .. } => Pin::new(file).poll_shutdown(context),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).poll_shutdown(context),
            SnapshotImage::Unpacked(_) => Poll::Ready(Err(read_only())),
        }
    }
}

impl AsyncSeek for SnapshotImage {
    fn start_seek(self: Pin<&mut Self>, position: std::io::SeekFrom) -> std::io::Result<()> {
        match self.get_mut() {
            SnapshotImage::File { file, .. } => Pin::new(file).start_seek(position),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).start_seek(position),
            SnapshotImage::Unpacked(unpacked) => {
                unpacked.seek = Some(position);
                Ok(())
            }
        }
    }

    fn poll_complete(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        let image = self.get_mut();
        ready!(image.poll_packed(context))?;
        match image {
            SnapshotImage::File { file, .. } => Pin::new(file).poll_complete(context),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).poll_complete(context),
            SnapshotImage::Unpacked(_) => Poll::Ready(Err(std::io::Error::other("the image is not packed"))),
        }
    }
}

fn read_only() -> std::io::Error {
    std::io::Error::other("an image being packed is read, not written")
}
