//! Minimal proleptic-Gregorian date helpers (no chrono in this layer):
//! `YYYY-MM-DD` ↔ epoch days and ISO/RFC 3339 instants → epoch ms.

const MS_PER_DAY: i64 = 86_400_000;

/// Days since 1970-01-01 of a civil date (H. Hinnant's `days_from_civil`).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Civil date of a day count since 1970-01-01 (`civil_from_days`).
/// Valid for |days| below about 2^60 (far beyond any stored Date32).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Exactly `n` ASCII digits at the front of `s`, as a number, and the rest.
fn digits(s: &str, n: usize) -> Option<(u32, &str)> {
    let head = s.get(..n)?;
    if !head.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((head.parse().ok()?, s.get(n..)?))
}

fn expect_char(s: &str, c: char) -> Option<&str> {
    s.strip_prefix(c)
}

/// `YYYY-MM-DD` at the front of `s` → (epoch days, rest).
fn date_prefix(s: &str) -> Option<(i64, &str)> {
    let (year, rest) = digits(s, 4)?;
    let (month, rest) = digits(expect_char(rest, '-')?, 2)?;
    let (day, rest) = digits(expect_char(rest, '-')?, 2)?;
    let year = i64::from(year);
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    Some((days_from_civil(year, month, day), rest))
}

/// `YYYY-MM-DD` → epoch days.
pub fn parse_date(s: &str) -> Option<i64> {
    match date_prefix(s)? {
        (days, "") => Some(days),
        _ => None,
    }
}

/// `YYYY-MM-DD[(T| )HH:MM[:SS[.fff…]]][Z|±HH:MM|±HHMM]` → epoch ms (UTC).
/// Fractions beyond milliseconds are truncated; no zone means UTC.
pub fn parse_datetime(s: &str) -> Option<i64> {
    let (days, rest) = date_prefix(s)?;
    let mut ms = days.checked_mul(MS_PER_DAY)?;
    if rest.is_empty() {
        return Some(ms);
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (time_ms, rest) = time_of_day(rest)?;
    ms = ms.checked_add(time_ms)?;
    let offset_ms = zone_offset(rest)?;
    ms.checked_sub(offset_ms)
}

/// `HH:MM[:SS[.fff…]]` → (ms since midnight, rest).
fn time_of_day(s: &str) -> Option<(i64, &str)> {
    let (hour, rest) = digits(s, 2)?;
    let (minute, mut rest) = digits(expect_char(rest, ':')?, 2)?;
    let mut second = 0;
    let mut millis = 0;
    if let Some(after) = rest.strip_prefix(':') {
        let (sec, after) = digits(after, 2)?;
        second = sec;
        rest = after;
        if let Some(frac) = rest.strip_prefix(['.', ',']) {
            let len = frac.bytes().take_while(u8::is_ascii_digit).count();
            if len == 0 {
                return None;
            }
            let (text, after) = (frac.get(..len)?, frac.get(len..)?);
            let padded = format!("{:0<3}", text.get(..len.min(3))?);
            millis = padded.parse::<u32>().ok()?;
            rest = after;
        }
    }
    // 60 admits a leap second, which then rolls into the next minute.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let ms = ((i64::from(hour) * 60 + i64::from(minute)) * 60 + i64::from(second)) * 1000 + i64::from(millis);
    Some((ms, rest))
}

/// `""`, `Z`, `±HH:MM` or `±HHMM` → offset east of UTC in ms.
fn zone_offset(s: &str) -> Option<i64> {
    if s.is_empty() || s == "Z" || s == "z" {
        return Some(0);
    }
    let sign = match s.chars().next()? {
        '+' => 1,
        '-' => -1,
        _ => return None,
    };
    let rest = s.get(1..)?;
    let (hours, rest) = digits(rest, 2)?;
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    let (minutes, rest) = digits(rest, 2)?;
    if !rest.is_empty() || hours > 23 || minutes > 59 {
        return None;
    }
    Some(sign * (i64::from(hours) * 60 + i64::from(minutes)) * 60_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        assert_eq!(parse_date("1970-01-01"), Some(0));
        assert_eq!(parse_date("2000-03-01"), Some(11_017));
        assert_eq!(parse_date("1969-12-31"), Some(-1));
        assert_eq!(parse_date("2023-02-29"), None);
        assert_eq!(parse_date("2024-02-29").map(civil_from_days), Some((2024, 2, 29)));
        for d in [-800_000, -1, 0, 59, 60, 11_016, 20_000, 2_932_896] {
            let (y, m, day) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, day), d);
        }
    }

    #[test]
    fn datetimes_parse() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_datetime("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(parse_datetime("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_datetime("2024-01-02 03:04:05.123456"), Some(1_704_164_645_123));
        assert_eq!(parse_datetime("1970-01-02"), Some(86_400_000));
        assert_eq!(parse_datetime("1970-01-01T24:00:00Z"), None);
        assert_eq!(parse_datetime("1970-01-01T00:00:00Q"), None);
    }
}
