//! Snapshots as they are stored and streamed: the record saved beside an
//! image (openraft's meta), and the image itself, which openraft reads in
//! chunks to send and writes chunk by chunk as it receives. RocksDB's image
//! is a file, so no snapshot is ever held whole in memory; the in-memory
//! engine's is bytes, so simulations never touch the disk.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

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

/// A snapshot image: a file of RocksDB's packed image, or the in-memory
/// engine's bytes.
pub enum SnapshotImage {
    File { path: PathBuf, file: tokio::fs::File },
    Memory(Cursor<Vec<u8>>),
}

impl std::fmt::Debug for SnapshotImage {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotImage::File { path, .. } => write!(formatter, "SnapshotImage({})", path.display()),
            SnapshotImage::Memory(bytes) => write!(formatter, "SnapshotImage({} bytes)", bytes.get_ref().len()),
        }
    }
}

impl SnapshotImage {
    /// Opens an image file for openraft to read or write.
    pub fn open_file(path: &Path, file: std::fs::File) -> Self {
        SnapshotImage::File {
            path: path.to_owned(),
            file: tokio::fs::File::from_std(file),
        }
    }

    /// The file of a file image.
    pub fn path(&self) -> Option<&Path> {
        match self {
            SnapshotImage::File { path, .. } => Some(path),
            SnapshotImage::Memory(_) => None,
        }
    }

    /// The bytes of a memory image.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            SnapshotImage::File { .. } => None,
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
        match self.get_mut() {
            SnapshotImage::File { file, .. } => Pin::new(file).poll_read(context, buffer),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).poll_read(context, buffer),
        }
    }
}

impl AsyncWrite for SnapshotImage {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            SnapshotImage::File { file, .. } => Pin::new(file).poll_write(context, data),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).poll_write(context, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            SnapshotImage::File { file, .. } => Pin::new(file).poll_flush(context),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).poll_flush(context),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            SnapshotImage::File { file, .. } => Pin::new(file).poll_shutdown(context),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).poll_shutdown(context),
        }
    }
}

impl AsyncSeek for SnapshotImage {
    fn start_seek(self: Pin<&mut Self>, position: std::io::SeekFrom) -> std::io::Result<()> {
        match self.get_mut() {
            SnapshotImage::File { file, .. } => Pin::new(file).start_seek(position),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).start_seek(position),
        }
    }

    fn poll_complete(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        match self.get_mut() {
            SnapshotImage::File { file, .. } => Pin::new(file).poll_complete(context),
            SnapshotImage::Memory(bytes) => Pin::new(bytes).poll_complete(context),
        }
    }
}
