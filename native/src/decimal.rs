//! Decimal digits read eight at a time, and a decimal number (mantissa x 10^exponent) to the nearest f64 exactly
//! as a correctly rounded parser gives it, for the forms logprobs come in (None for the rest, which the caller gives
//! to core's parser).
//!
//! Two exact methods, no tables (and `near_f64`, an inexact one, for values that only become float32):
//!   - both the mantissa (<= 2^53) and the power of ten (<= 10^22) are exact f64 values: one IEEE multiplication
//!     or division rounds their product or quotient correctly;
//!   - up to 19 digits over 10^1..10^21 (Python's 17-digit reprs of logprobs): the quotient computed in 128-bit
//!     integers with its remainder, and rounded to 53 bits (to nearest, ties to even) by hand.

const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// mantissa x 10^exponent, non-negative, correctly rounded; None where neither exact method applies.
pub fn to_f64(mantissa: u64, exponent: i32) -> Option<f64> {
    if mantissa == 0 {
        return Some(0.0);
    }
    if mantissa <= 1 << 53 && (-22..=22).contains(&exponent) {
        let m = mantissa as f64; // exact
        return Some(if exponent >= 0 {
            m * POW10[exponent as usize]
        } else {
            m / POW10[(-exponent) as usize]
        });
    }
    if !(-21..=-1).contains(&exponent) {
        return None;
    }
    // m / 10^k with m normalized to [2^63, 2^64): N = m * 2^64 < 2^128 and 10^k < 2^70, so the quotient has at
    // least 57 bits: enough for 53 and a rounding bit, the remainder telling whether anything lies beyond.
    let shift_in = mantissa.leading_zeros();
    let numerator = u128::from(mantissa << shift_in) << 64;
    let divisor = 10u128.pow((-exponent) as u32);
    let (quotient, remainder) = (numerator / divisor, numerator % divisor);
    let bits = 128 - quotient.leading_zeros();
    let shift_out = bits - 53;
    let low = quotient & ((1u128 << shift_out) - 1);
    let half = 1u128 << (shift_out - 1);
    let mut top = (quotient >> shift_out) as u64;
    if low > half || (low == half && (remainder != 0 || top & 1 == 1)) {
        top += 1; // at most 2^53: still exact
    }
    // value = top * 2^(shift_out - 64 - shift_in), well inside the normal range (10^-21 <= value < 2^64).
    let power = shift_out as i32 - 64 - shift_in as i32;
    Some(top as f64 * f64::from_bits(((1023 + power) as u64) << 52))
}

/// mantissa x 10^exponent, non-negative, within a few f64 ulps, for a caller that only rounds it to float32 and
/// compares it with float32 values; None where the exact methods apply or that cannot be shown (then `to_f64`).
///
/// For a mantissa beyond 2^53 and a power of ten up to 10^22: one rounding of the mantissa and one of the IEEE
/// product or quotient, so a relative error of at most 2^-52 (2 ulps) against the decimal value, and 2.5 ulps
/// against the correctly rounded f64. Taken only when it lies in float32's normal range and at least `GUARD` f64
/// ulps from every float32 value and every midpoint between two: there the correctly rounded f64 lies on the same
/// side of all of them, so it rounds to the same float32 and compares with any float32 alike.
#[inline]
pub fn near_f64(mantissa: u64, exponent: i32) -> Option<f64> {
    const GUARD: u64 = 16;
    const HALF: u64 = 1 << 28; // an f64 ulp counts 2^29 in a float32 ulp (52 - 23 mantissa bits)
    const MIN_NORMAL_F32: f64 = 1.1754943508222875e-38; // 2^-126
    const TOP: f64 = 1.7014118346046923e38; // 2^127, well below float32's largest (which the caller checks)
    if mantissa <= 1 << 53 || !(-22..=22).contains(&exponent) {
        return None;
    }
    let m = mantissa as f64;
    let value = if exponent >= 0 {
        m * POW10[exponent as usize]
    } else {
        m / POW10[(-exponent) as usize]
    };
    if !(MIN_NORMAL_F32..=TOP).contains(&value) {
        return None;
    }
    let low = value.to_bits() & (2 * HALF - 1);
    let near_f32 = low <= GUARD || low >= 2 * HALF - GUARD;
    let near_midpoint = low.abs_diff(HALF) <= GUARD;
    (!near_f32 && !near_midpoint).then_some(value)
}

/// Reads the digits at `pos` into `mantissa` (wrapping past 19 digits: the caller then discards it); their count.
#[inline]
pub fn digits(bytes: &[u8], pos: &mut usize, mantissa: &mut u64) -> usize {
    let from = *pos;
    while let Some(chunk) = bytes.get(*pos..*pos + 8) {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let Some(value) = eight_digits(word) else {
            break;
        };
        *mantissa = mantissa.wrapping_mul(100_000_000).wrapping_add(value);
        *pos += 8;
    }
    while let Some(&d @ b'0'..=b'9') = bytes.get(*pos) {
        *mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
        *pos += 1;
    }
    *pos - from
}

/// Eight ASCII digits (the first in the lowest byte) as their value; None if any byte is not a digit. The usual
/// SWAR reading: a byte is a digit when its high nibble is 3 and adding 6 leaves it so; then pairs, quads, all.
#[inline]
fn eight_digits(word: u64) -> Option<u64> {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    let plus_six = word.wrapping_add(0x0606_0606_0606_0606);
    if (word & HIGH) | ((plus_six & HIGH) >> 4) != 0x3333_3333_3333_3333 {
        return None;
    }
    let mut v = word - 0x3030_3030_3030_3030;
    v = v.wrapping_mul(10).wrapping_add(v >> 8); // each even byte: two digits
    let pairs = v & 0x0000_00FF_0000_00FF;
    let next_pairs = (v >> 16) & 0x0000_00FF_0000_00FF;
    Some(
        pairs
            .wrapping_mul(100 + (1_000_000 << 32))
            .wrapping_add(next_pairs.wrapping_mul(1 + (10_000 << 32)))
            >> 32,
    )
}
