//! Fast paths for the values every log row holds: a CSV line split into borrowed fields (into
//! a reused vector), a decimal number, a date and time in the common layouts. Each fast path
//! takes only what it reads exactly as the careful path (`smi_csv::parse_timestamp`, `number`)
//! would, and answers `None` for anything else, which then goes the careful way: they can only
//! be faster, never read differently (property tests beside the careful paths check it).
//!
//! Hand-written rather than a crate: the conversion itself is the standard library's (already
//! the Eisel-Lemire algorithm of `fast-float`) or exact by construction (Clinger's fast path);
//! what cost the time was finding a value's end, its unit and trying four `chrono` layouts in
//! turn, which no parsing crate does for us.

/// Splits `line` at commas into `out` (cleared first): each field trimmed, and the quotes of a
/// quoted field (`"utilization.gpu [%]"`, a spreadsheet's) dropped and its inside trimmed.
pub(crate) fn split_into<'a>(line: &'a str, out: &mut Vec<&'a str>) {
    split_first(line, usize::MAX, out);
}

/// As [`split_into`], stopping after the first `n` fields (the rest of the line is not split).
pub(crate) fn split_first<'a>(line: &'a str, n: usize, out: &mut Vec<&'a str>) {
    out.clear();
    if n == 0 {
        return;
    }
    let b = line.as_bytes();
    let mut start = 0;
    loop {
        // Fields are short: a plain loop finds the comma sooner than a vector search's set-up.
        let end = b[start..]
            .iter()
            .position(|&c| c == b',')
            .map_or(b.len(), |i| start + i);
        let f = trim(&line[start..end]);
        out.push(
            f.strip_prefix('"')
                .and_then(|q| q.strip_suffix('"'))
                .map_or(f, str::trim),
        );
        if end == b.len() || out.len() == n {
            return;
        }
        start = end + 1;
    }
}

/// `s` without its line break (`\n` or `\r\n`).
pub(crate) fn chomp(s: &str) -> &str {
    let s = s.strip_suffix('\n').unwrap_or(s);
    s.strip_suffix('\r').unwrap_or(s)
}

/// `s.trim()`, answered without decoding characters when both ends are visible ASCII (the
/// common case: nothing to trim).
pub(crate) fn trim(s: &str) -> &str {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) if f.is_ascii_graphic() && l.is_ascii_graphic() => s,
        _ => s.trim(),
    }
}

/// `buf` as text: borrowed when it is valid UTF-8 (the common case, checked by the standard
/// library's fast validation), else with U+FFFD for each invalid sequence.
pub(crate) fn utf8(buf: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(buf) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(buf),
    }
}

/// An emptied vector of fields, its allocation kept for a line of another lifetime.
pub(crate) fn recycle<'b>(mut v: Vec<&str>) -> Vec<&'b str> {
    v.clear();
    // Collecting an empty vector's iterator into one of the same layout reuses its buffer.
    v.into_iter().map(|_| "").collect()
}

/// Powers of ten that are exact in an f64.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The plain decimal number at the start of `v` (`87`, `40123`, `250.12`, `.5`): its value and
/// its length in bytes. `None` when the start is not one the fast path takes exactly (a sign, an
/// exponent, a second dot, more than 15 digits, no digit at all): the caller parses it the
/// careful way.
#[inline(always)]
pub(crate) fn decimal_prefix(v: &[u8]) -> Option<(f64, usize)> {
    // The integer part's digits, then the fraction's; more than 15 in all are refused below,
    // so the wrapping arithmetic never gives a value that is kept.
    let digits_from = |mut i: usize, m: &mut u64| {
        // Eight digits at a time while there are (an epoch time has ten), then one at a time.
        while let Some(x) = v.get(i..i + 8).and_then(eight_digits) {
            *m = m.wrapping_mul(100_000_000).wrapping_add(x);
            i += 8;
        }
        while i < v.len() {
            let d = v[i].wrapping_sub(b'0');
            if d >= 10 {
                break;
            }
            *m = m.wrapping_mul(10).wrapping_add(u64::from(d));
            i += 1;
        }
        i
    };
    let mut m: u64 = 0;
    let mut i = digits_from(0, &mut m);
    let int_digits = i;
    let mut frac = 0usize;
    if v.get(i) == Some(&b'.') {
        let end = digits_from(i + 1, &mut m);
        frac = end - (i + 1);
        i = end;
    }
    let digits = int_digits + frac;
    if digits == 0 || digits > 15 || matches!(v.get(i), Some(b'.' | b'e' | b'E' | b'+' | b'-')) {
        return None;
    }
    // m < 10^15 < 2^53 and 10^frac exact: one correctly rounded division, the value
    // `str::parse` gives (Clinger's fast path); a whole number needs none.
    // Converted as an i64 (m < 2^53 fits): one instruction, where a u64 takes several.
    let x = m as i64 as f64;
    Some((if frac == 0 { x } else { x / POW10[frac] }, i))
}

/// The value of eight ASCII digits, `None` if any of the bytes is no digit: the bytes are
/// checked and summed together in one word (the SWAR method of simdjson's
/// `parse_eight_digits_unrolled`).
fn eight_digits(b: &[u8]) -> Option<u64> {
    let w = u64::from_le_bytes(b.try_into().ok()?);
    // Each byte is 0x30..=0x39: its high nibble is 3, and adding 6 leaves it 3.
    let hi = 0xF0F0_F0F0_F0F0_F0F0u64;
    if (w & hi) | ((w.wrapping_add(0x0606_0606_0606_0606) & hi) >> 4) != 0x3333_3333_3333_3333 {
        return None;
    }
    // The first digit is the lowest byte: pairs, then fours, then the eight.
    let d = w - 0x3030_3030_3030_3030;
    let pairs = (d.wrapping_mul(10) + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
    let fours = (pairs.wrapping_mul(100) + (pairs >> 16)) & 0x0000_FFFF_0000_FFFF;
    Some((fours.wrapping_mul(10_000) + (fours >> 32)) & 0xFFFF_FFFF)
}

/// The whole of `v` as a plain decimal number (`None`: not one the fast path takes).
pub(crate) fn decimal(v: &str) -> Option<f64> {
    match decimal_prefix(v.as_bytes()) {
        Some((x, n)) if n == v.len() => Some(x),
        _ => None,
    }
}

fn two(b: &[u8], i: usize) -> Option<u32> {
    let (h, l) = (b[i].wrapping_sub(b'0'), b[i + 1].wrapping_sub(b'0'));
    (h < 10 && l < 10).then(|| u32::from(h) * 10 + u32::from(l))
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given date of the proleptic Gregorian calendar.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2024/01/31 12:00:00.123`, `2024-01-31T12:00:00`, `2024-01-31 12:00:00.5Z` (the date's
/// separators both `/` or both `-`, then `T` or a space, two digits for every field, at most 9
/// digits of fraction, nothing after them but a `Z`) → seconds since the Unix epoch, as
/// `smi_csv::parse_timestamp` computes them. `None` for every other text and for a date or
/// time that names no moment (February 30th, 25:00, a leap second): the careful path decides
/// those.
pub(crate) fn timestamp(v: &str) -> Option<f64> {
    let b = v.as_bytes();
    if b.len() < 19 {
        return None;
    }
    let sep = b[4];
    if !(sep == b'/' || sep == b'-') || b[7] != sep || !(b[10] == b' ' || b[10] == b'T') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = i64::from(two(b, 0)? * 100 + two(b, 2)?);
    let (mon, day) = (two(b, 5)?, two(b, 8)?);
    let (h, mi, s) = (two(b, 11)?, two(b, 14)?, two(b, 17)?);
    if !(1..=12).contains(&mon) || day == 0 || day > days_in_month(year, mon) {
        return None;
    }
    if h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0u32;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let n = i - start;
        if n == 0 || n > 9 {
            return None;
        }
        for &c in &b[start..i] {
            nanos = nanos * 10 + u32::from(c - b'0');
        }
        nanos *= 10u32.pow((9 - n) as u32);
    }
    match &b[i..] {
        [] | [b'Z'] => {}
        _ => return None,
    }
    let secs = days_from_civil(year, mon, day) * 86_400
        + i64::from(h) * 3600
        + i64::from(mi) * 60
        + i64::from(s);
    Some(secs as f64 + f64::from(nanos) / 1e9)
}

/// Might `v` be a date and time of one of the careful path's layouts at all? Each of them has
/// a `/` or a `-` between the year and the month, but ctime's, which starts with a weekday's
/// name and has a `:`: a value with none of these (an epoch count, a number) is not one, and
/// needs no `chrono` parse to say so. (A year with a `+` sign has no
/// width limit, and one too long to be a number is "out of range", not "not a date": those
/// go the careful way too.)
pub(crate) fn may_be_date(v: &str) -> bool {
    v.starts_with('+')
        || memchr::memchr2(b'/', b'-', v.as_bytes()).is_some()
        // ctime's `Wed Dec  2 12:00:00 2026`.
        || (v.as_bytes()[0].is_ascii_alphabetic() && v.contains(':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_trims_and_unquotes_and_keeps_empty_fields() {
        let mut out = Vec::new();
        split_into(r#" a , "b [%]" ,, " c "#, &mut out);
        assert_eq!(out, ["a", "b [%]", "", "\" c"]);
        split_into("", &mut out);
        assert_eq!(out, [""]);
        split_into("x,", &mut out);
        assert_eq!(out, ["x", ""]);
        let kept = out.capacity();
        let again: Vec<&str> = recycle(out);
        assert!(again.is_empty() && again.capacity() == kept);
    }

    proptest::proptest! {
        #[test]
        fn trim_and_chomp_are_the_standard_trim(s in "[ \t\r\na-z0-9,\u{a0}\u{2003}é]{0,12}") {
            proptest::prop_assert_eq!(trim(&s), s.trim());
            proptest::prop_assert_eq!(trim(chomp(&s)), s.trim());
        }
    }

    #[test]
    fn eight_digits_at_once() {
        assert_eq!(eight_digits(b"17066592"), Some(17_066_592));
        assert_eq!(eight_digits(b"00000000"), Some(0));
        assert_eq!(eight_digits(b"99999999"), Some(99_999_999));
        assert_eq!(eight_digits(b"1706659"), None);
        for i in 0..8 {
            for bad in [b'/', b':', b' ', b'.', 0, 0xff, 0xfa, b'0' + 0x80] {
                let mut b = *b"12345678";
                b[i] = bad;
                assert_eq!(eight_digits(&b), None, "{b:?}");
            }
        }
        let mut x = 12_345u64;
        for _ in 0..100_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let n = (x >> 20) % 100_000_000;
            assert_eq!(eight_digits(format!("{n:08}").as_bytes()), Some(n));
        }
    }

    #[test]
    fn decimals() {
        assert_eq!(decimal("87"), Some(87.0));
        assert_eq!(decimal("250.12"), Some(250.12));
        assert_eq!(decimal(".5"), Some(0.5));
        assert_eq!(decimal("5."), Some(5.0));
        assert_eq!(decimal("0.1"), Some(0.1));
        assert_eq!(decimal("1e5"), None);
        assert_eq!(decimal("-1"), None);
        assert_eq!(decimal("."), None);
        assert_eq!(decimal("1.2.3"), None);
        assert_eq!(decimal("1234567890123456"), None);
        assert_eq!(decimal_prefix(b"40123 MiB"), Some((40123.0, 5)));
        assert_eq!(decimal_prefix(b"12abc"), Some((12.0, 2)));
    }

    #[test]
    fn timestamps() {
        assert_eq!(timestamp("1970/01/01 00:00:01"), Some(1.0));
        assert_eq!(timestamp("2024-01-31T00:00:00Z"), Some(1_706_659_200.0));
        assert_eq!(timestamp("2024/01/31 00:00:00.250"), Some(1_706_659_200.25));
        assert_eq!(timestamp("2024/02/29 00:00:00"), Some(1_709_164_800.0));
        assert_eq!(timestamp("2023/02/29 00:00:00"), None);
        assert_eq!(timestamp("2024/01/31 24:00:00"), None);
        assert_eq!(timestamp("2024/01-31 00:00:00"), None);
        assert_eq!(timestamp("2024/01/31 00:00:00+01:00"), None);
        assert_eq!(timestamp("2024/01/31 00:00:00.1234567891"), None);
        assert_eq!(timestamp("2024/1/31 00:00:00"), None);
        assert!(may_be_date("2024/01/31") && !may_be_date("1706659200.5"));
    }
}
