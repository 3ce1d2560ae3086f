//! Backups through the SDK: `Client::save_backup` asks one member (the
//! first endpoint that takes it) for a backup and streams its header and
//! image into a writer, checking the image as it arrives. The format is
//! `lode_types::backup`; the member keeps the image until the stream ends.

use std::time::Duration;

use lode_types::backup::{encode_header, BackupHeader, ImageCheck, BACKUP_CHUNK_BYTES_MAX};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::connection::Connection;
use crate::{Client, LodeError};

/// How long a member may take to take a backup (it reads the whole state).
pub const BACKUP_TAKE_TIMEOUT: Duration = Duration::from_secs(600);

impl Client {
    /// Writes a backup of the cluster's state, as applied by the first
    /// endpoint that takes one, to `out`: the header, then the image.
    /// Answers the header once every byte arrived and matched it; on an
    /// error `out` holds a partial file that must be discarded.
    pub async fn save_backup<W: AsyncWrite + Unpin>(&self, out: &mut W) -> Result<BackupHeader, LodeError> {
        let mut refusals = Vec::new();
        for connection in self.member_connections() {
            let begun = connection
                .request(BACKUP_TAKE_TIMEOUT, |client, context| async move {
                    client.backup_begin(context).await
                })
                .await;
            match begun {
                Ok((id, header)) => {
                    let streamed = self.stream_backup(&connection, id, &header, out).await;
                    let _ = connection
                        .call(self.attempt_timeout(), |client, context| async move {
                            client.backup_end(context, id).await
                        })
                        .await;
                    return streamed.map(|()| header);
                }
                Err(error @ (LodeError::Forbidden { .. } | LodeError::Unauthorized)) => return Err(error),
                Err(error) => refusals.push(format!("{}: {error}", connection.address())),
            }
        }
        Err(LodeError::Unavailable(format!(
            "no member took a backup ({})",
            refusals.join("; ")
        )))
    }

    async fn stream_backup<W: AsyncWrite + Unpin>(
        &self,
        connection: &Connection,
        id: u64,
        header: &BackupHeader,
        out: &mut W,
    ) -> Result<(), LodeError> {
        let write_failed =
            |error: std::io::Error| LodeError::Unavailable(format!("writing the backup failed: {error}"));
        out.write_all(&encode_header(header).map_err(LodeError::Invalid)?)
            .await
            .map_err(write_failed)?;
        let mut check = ImageCheck::new(header);
        let mut offset = 0u64;
        while offset < header.image_bytes {
            let chunk = connection
                .request(self.attempt_timeout(), |client, context| async move {
                    client.backup_read(context, id, offset, BACKUP_CHUNK_BYTES_MAX).await
                })
                .await?;
            if chunk.is_empty() {
                return Err(LodeError::Unavailable(format!(
                    "the member answered no bytes at offset {offset} of {}",
                    header.image_bytes
                )));
            }
            check.update(&chunk).map_err(LodeError::Invalid)?;
            out.write_all(&chunk).await.map_err(write_failed)?;
            offset += chunk.len() as u64;
        }
        check.finish().map_err(LodeError::Invalid)?;
        out.flush().await.map_err(write_failed)
    }
}
