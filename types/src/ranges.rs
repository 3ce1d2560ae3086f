//! Key ranges of a consistent multi-range read (Deno KV's snapshot read).

use serde::{Deserialize, Serialize};

use crate::limits;

/// One key range of a range read: `start <= key < end`, walked forwards or
/// backwards, at most `limit` live entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRange {
    #[serde(with = "serde_bytes")]
    pub start: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub end: Vec<u8>,
    pub limit: u32,
    pub reverse: bool,
}

impl KeyRange {
    /// Checks the bounds and the limit; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        use crate::limits::{RANGE_BOUND_BYTES_MAX, RANGE_ENTRIES_MAX};
        for (field, bound) in [("range start", &self.start), ("range end", &self.end)] {
            if bound.len() > RANGE_BOUND_BYTES_MAX {
                return Err(limits::over_limit(
                    field,
                    limits::bytes(bound.len()),
                    "range_bound_bytes_max",
                    RANGE_BOUND_BYTES_MAX,
                ));
            }
        }
        if self.limit == 0 || self.limit as usize > RANGE_ENTRIES_MAX {
            return Err(format!(
                "range limit is {}; it must be 1 to range_entries_max = {RANGE_ENTRIES_MAX}",
                self.limit
            ));
        }
        Ok(())
    }
}

/// Checks the ranges of one range read.
pub fn validate_ranges(ranges: &[KeyRange]) -> Result<(), String> {
    if ranges.len() > limits::RANGES_PER_READ_MAX {
        return Err(limits::over_limit(
            "the number of ranges",
            ranges.len(),
            "ranges_per_read_max",
            limits::RANGES_PER_READ_MAX,
        ));
    }
    ranges.iter().try_for_each(KeyRange::validate)
}
