//! The two V8 ValueSerializer values a Deno KV `sum` adds: numbers and
//! bigints. A sum of V8 values reads the stored value and the operand in
//! this format and writes the result back in it; every other V8 value is
//! opaque to Lode.
//!
//! Layout: `0xFF`, the format version (a varint), optional `0x00` padding,
//! then a tag: `I` (zigzag varint int32), `U` (varint uint32), `N`
//! (little-endian f64) or `Z` (a varint of byte length × 2 + sign, then the
//! magnitude's bytes, little-endian). Bigints up to 128 bits are handled;
//! a longer one is refused rather than truncated.

use crate::Encoding;

/// The serializer version written in front of every value Lode encodes
/// (what Deno writes today).
const FORMAT_VERSION: u8 = 15;

/// A number or a bigint a V8 sum works on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum V8Number {
    Number(f64),
    BigInt(i128),
}

impl V8Number {
    /// The kind's name, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            V8Number::Number(_) => "number",
            V8Number::BigInt(_) => "bigint",
        }
    }

    /// Whether two values are of one kind.
    pub fn same_kind(&self, other: &V8Number) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }

    /// Decodes a V8-serialized number or bigint; the message says why not.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut reader = Reader { bytes, at: 0 };
        if reader.byte()? != 0xFF {
            return Err("not a V8-serialized value (no version header)".to_owned());
        }
        reader.varint()?;
        let mut tag = reader.byte()?;
        while tag == 0x00 {
            tag = reader.byte()?;
        }
        let value = match tag {
            b'I' => {
                let zigzag = reader.varint()?;
                let value = i64::try_from(zigzag >> 1).unwrap_or(0) ^ -i64::try_from(zigzag & 1).unwrap_or(0);
                V8Number::Number(value as f64)
            }
            b'U' => V8Number::Number(reader.varint()? as f64),
            b'N' => {
                let bytes: [u8; 8] = reader
                    .take(8)?
                    .try_into()
                    .map_err(|_| "a truncated number".to_owned())?;
                V8Number::Number(f64::from_le_bytes(bytes))
            }
            b'Z' => {
                let bitfield = reader.varint()?;
                let length = usize::try_from(bitfield >> 1).map_err(|_| "a bigint too long".to_owned())?;
                if length > 16 {
                    return Err(format!(
                        "a bigint of {length} bytes; sums of bigints beyond 128 bits are not supported"
                    ));
                }
                let mut magnitude = [0u8; 16];
                magnitude[..length].copy_from_slice(reader.take(length)?);
                let magnitude = u128::from_le_bytes(magnitude);
                let negative = bitfield & 1 == 1;
                let value = if negative {
                    0i128.checked_sub_unsigned(magnitude)
                } else {
                    i128::try_from(magnitude).ok()
                };
                V8Number::BigInt(value.ok_or("a bigint beyond 128 bits; sums of such bigints are not supported")?)
            }
            other => return Err(format!("a V8 value of tag {other:#04x}, not a number or a bigint")),
        };
        if reader.at != bytes.len() {
            return Err("trailing bytes after a V8 number".to_owned());
        }
        Ok(value)
    }

    /// Encodes the value as V8 serializes it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0xFF, FORMAT_VERSION];
        match *self {
            V8Number::Number(value) => {
                out.push(b'N');
                out.extend_from_slice(&value.to_le_bytes());
            }
            V8Number::BigInt(value) => {
                out.push(b'Z');
                let magnitude = value.unsigned_abs().to_le_bytes();
                let significant = magnitude.iter().rposition(|byte| *byte != 0).map_or(0, |last| last + 1);
                let length = significant.div_ceil(8) * 8;
                let bitfield = (length as u64) << 1 | u64::from(value < 0);
                write_varint(&mut out, bitfield);
                out.extend_from_slice(&magnitude[..length]);
            }
        }
        out
    }
}

/// A V8 sum's result: the stored value (`None` when absent) plus the
/// operand, kept within `min..=max` (refused outside them, or clamped).
/// A bigint operand on a stored KvU64 without bounds adds as a KvU64,
/// wrapping at 2^64, as Deno KV does. Returns the value and its encoding.
pub fn sum(
    stored: Option<(&Encoding, &[u8])>,
    operand: &[u8],
    min: Option<&[u8]>,
    max: Option<&[u8]>,
    clamp: bool,
) -> Result<(Vec<u8>, Encoding), String> {
    let operand = V8Number::decode(operand).map_err(|message| format!("the sum's operand is {message}"))?;
    let bound = |bound: Option<&[u8]>, name: &str| -> Result<Option<V8Number>, String> {
        let Some(bytes) = bound else { return Ok(None) };
        let bound = V8Number::decode(bytes).map_err(|message| format!("the sum's {name} is {message}"))?;
        if !bound.same_kind(&operand) {
            return Err(format!(
                "the sum's {name} is a {} and its operand a {}: min/max parameters must have the operand's type",
                bound.kind(),
                operand.kind()
            ));
        }
        Ok(Some(bound))
    };
    let (min, max) = (bound(min, "min")?, bound(max, "max")?);
    let current = match stored {
        None => return Ok((operand.encode(), Encoding::V8)),
        Some((Encoding::Le64, bytes)) => {
            let stored = <[u8; 8]>::try_from(bytes)
                .map(u64::from_le_bytes)
                .map_err(|_| "the stored KvU64 is not 8 bytes".to_owned())?;
            return match operand {
                V8Number::BigInt(addend) if min.is_none() && max.is_none() && !clamp => {
                    let addend = u64::try_from(addend)
                        .map_err(|_| format!("cannot sum a KvU64 with the bigint {addend}: it is outside 0..2^64"))?;
                    Ok((stored.wrapping_add(addend).to_le_bytes().to_vec(), Encoding::Le64))
                }
                _ => Err(format!("cannot sum a KvU64 with a {}", operand.kind())),
            };
        }
        Some((Encoding::V8, bytes)) => {
            V8Number::decode(bytes).map_err(|message| format!("the stored value is {message}"))?
        }
        Some((other, _)) => return Err(format!("cannot sum a value of encoding {other:?}")),
    };
    let outside =
        |message: String| format!("{message}: the sum is out of range (set clamp to keep it within min and max)");
    let result = match (current, operand) {
        (V8Number::BigInt(current), V8Number::BigInt(addend)) => {
            let mut total = current
                .checked_add(addend)
                .ok_or("the bigint sum is beyond 128 bits, which Lode does not support")?;
            if let Some(V8Number::BigInt(min)) = min {
                if total < min {
                    if !clamp {
                        return Err(outside(format!("{total} is below the min {min}")));
                    }
                    total = min;
                }
            }
            if let Some(V8Number::BigInt(max)) = max {
                if total > max {
                    if !clamp {
                        return Err(outside(format!("{total} is above the max {max}")));
                    }
                    total = max;
                }
            }
            V8Number::BigInt(total)
        }
        (V8Number::Number(current), V8Number::Number(addend)) => {
            let mut total = current + addend;
            if let Some(V8Number::Number(min)) = min {
                if total < min {
                    if !clamp {
                        return Err(outside(format!("{total} is below the min {min}")));
                    }
                    total = min;
                }
            }
            if let Some(V8Number::Number(max)) = max {
                if total > max {
                    if !clamp {
                        return Err(outside(format!("{total} is above the max {max}")));
                    }
                    total = max;
                }
            }
            V8Number::Number(total)
        }
        (current, operand) => {
            return Err(format!("cannot sum a {} with a {}", current.kind(), operand.kind()));
        }
    };
    Ok((result.encode(), Encoding::V8))
}

fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7F) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, String> {
        let byte = *self.bytes.get(self.at).ok_or("a truncated V8 value")?;
        self.at += 1;
        Ok(byte)
    }

    fn take(&mut self, count: usize) -> Result<&'a [u8], String> {
        let slice = self.bytes.get(self.at..self.at + count).ok_or("a truncated V8 value")?;
        self.at += count;
        Ok(slice)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            // The tenth byte holds the 64th bit alone; more would be lost.
            if shift == 63 && byte & 0x7E != 0 {
                return Err("a V8 varint over 64 bits".to_owned());
            }
            value |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a V8 varint longer than 64 bits".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_deno_writes() {
        // Bytes Deno's serializer produced for 5, -3, 2.5, 8n and -300n.
        assert_eq!(V8Number::decode(&[0xFF, 0x0F, b'I', 0x0A]), Ok(V8Number::Number(5.0)));
        assert_eq!(V8Number::decode(&[0xFF, 0x0F, b'I', 0x05]), Ok(V8Number::Number(-3.0)));
        let mut half = vec![0xFF, 0x0F, b'N'];
        half.extend_from_slice(&2.5f64.to_le_bytes());
        assert_eq!(V8Number::decode(&half), Ok(V8Number::Number(2.5)));
        assert_eq!(
            V8Number::decode(&[0xFF, 0x0F, b'Z', 0x10, 8, 0, 0, 0, 0, 0, 0, 0]),
            Ok(V8Number::BigInt(8))
        );
        assert_eq!(
            V8Number::decode(&[0xFF, 0x0F, b'Z', 0x11, 0x2C, 0x01, 0, 0, 0, 0, 0, 0]),
            Ok(V8Number::BigInt(-300))
        );
        assert!(V8Number::decode(&[0xFF, 0x0F, b'"', 1, b'x']).is_err());
        assert!(V8Number::decode(&[0xFF, 0x0F, b'I']).is_err());
    }

    fn v8(value: V8Number) -> Vec<u8> {
        value.encode()
    }

    #[test]
    fn sums_follow_deno_kv() {
        let five = v8(V8Number::Number(5.0));
        let stored = v8(V8Number::Number(3.0));
        let sum = |stored: Option<(&Encoding, &[u8])>, operand: &[u8], min, max, clamp| {
            sum(stored, operand, min, max, clamp).map(|(bytes, encoding)| (V8Number::decode(&bytes), encoding))
        };
        // Absent: the operand.
        assert_eq!(
            sum(None, &five, None, None, false),
            Ok((Ok(V8Number::Number(5.0)), Encoding::V8))
        );
        assert_eq!(
            sum(Some((&Encoding::V8, &stored)), &five, None, None, false),
            Ok((Ok(V8Number::Number(8.0)), Encoding::V8))
        );
        // Bounds refuse, or clamp.
        let max = v8(V8Number::Number(6.0));
        let refused = sum(Some((&Encoding::V8, &stored)), &five, None, Some(&max), false);
        assert!(refused.expect_err("out of range").contains("out of range"));
        assert_eq!(
            sum(Some((&Encoding::V8, &stored)), &five, None, Some(&max), true),
            Ok((Ok(V8Number::Number(6.0)), Encoding::V8))
        );
        let big_min = v8(V8Number::BigInt(0));
        let mixed = sum(Some((&Encoding::V8, &stored)), &five, Some(&big_min), None, false);
        assert!(mixed.expect_err("mixed kinds").contains("must have the operand's type"));
        // Bigints, and the KvU64 compatibility path.
        let minus_ten = v8(V8Number::BigInt(-10));
        let one = v8(V8Number::BigInt(1));
        assert_eq!(
            sum(Some((&Encoding::V8, &one)), &minus_ten, Some(&big_min), None, true),
            Ok((Ok(V8Number::BigInt(0)), Encoding::V8))
        );
        let kv_u64 = u64::MAX.to_le_bytes();
        assert_eq!(
            sum(
                Some((&Encoding::Le64, &kv_u64)),
                &v8(V8Number::BigInt(2)),
                None,
                None,
                false
            )
            .map(|(_, encoding)| encoding),
            Ok(Encoding::Le64)
        );
        assert!(sum(Some((&Encoding::Le64, &kv_u64)), &five, None, None, false).is_err());
        assert!(sum(Some((&Encoding::V8, &stored)), &one, None, None, false)
            .expect_err("number + bigint")
            .contains("cannot sum a number with a bigint"));
        assert!(sum(Some((&Encoding::Json, b"1")), &five, None, None, false).is_err());
    }

    #[test]
    fn round_trips() {
        for value in [
            V8Number::Number(0.0),
            V8Number::Number(-1.5e300),
            V8Number::BigInt(0),
            V8Number::BigInt(-1),
            V8Number::BigInt(i128::MAX),
            V8Number::BigInt(i128::MIN + 1),
            V8Number::BigInt(1 << 64),
        ] {
            assert_eq!(V8Number::decode(&value.encode()), Ok(value), "{value:?}");
        }
    }

    /// Found by fuzzing (`fuzz/corpus/v8_numbers`): a bigint's huge length
    /// overflowed the refusal's message, and a varint's tenth byte lost
    /// bits.
    #[test]
    fn oversized_lengths_and_varints_are_refused() {
        let huge_bigint = [
            0xFF, 0x0F, b'Z', 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01,
        ];
        let refused = V8Number::decode(&huge_bigint).expect_err("a bigint of 2^60 bytes");
        assert!(refused.contains("bigint"), "{refused}");
        let long_varint = [
            0xFF, 0x0F, b'U', 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F,
        ];
        let refused = V8Number::decode(&long_varint).expect_err("a varint over 64 bits");
        assert!(refused.contains("64 bits"), "{refused}");
    }
}
