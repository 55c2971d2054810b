//! Throughput from the job's own output: tqdm-style progress bars (and anything printing the
//! same `[elapsed<remaining, rate]` block), or a user-supplied `--rate-regex`.
//!
//! tqdm redraws its bar with `\r`, so output is split on both `\r` and `\n` before parsing.
//! Rates are `%5.2f{unit}/s`, or `{s}s/{unit}` below 1 unit/s, k/M/G-scaled with `unit_scale`
//! (decimal prefixes are assumed: a bar made with `unit_divisor=1024` reads 2.4% low per prefix).

use regex::Regex;
use std::sync::OnceLock;

/// One progress reading.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reading {
    /// The counter (`45` in `45/100`) when it is printed exactly (no k/M scaling, no decimals).
    pub count: Option<u64>,
    /// The total as printed (`100` in `45/100`), which tells nested bars apart.
    pub total: Option<String>,
    /// The rate shown, in `unit` per second (`None` for tqdm's `?it/s` before the first update).
    pub rate_per_s: Option<f64>,
    /// The unit counted: `it`, `img`, `samples`, `B`.
    pub unit: String,
}

fn bracket_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        // `[00:04<00:05, 10.07it/s` or `[1:02:03, 2.50s/it, loss=0.1]`
        Regex::new(r"\[(?:\d+:)?\d+:\d\d(?:<(?:\?|(?:\d+:)?\d+:\d\d|[^,\]]*))?,\s*([^,\]]+)")
            .expect("valid regex")
    })
}

fn counter_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        // ` 45/100 ` or `1.23kit ` right before the bracket.
        Regex::new(r"(\d+(?:\.\d+)?)([kMGTPEZY]?)(?:/(\S+)|[A-Za-z_]*)\s*$").expect("valid regex")
    })
}

fn rate_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"^(\?|\d+(?:\.\d+)?)([kMGTPEZY]?)(s/)?([^/\s]*)(/s)?$").expect("valid regex")
    })
}

/// The multiplier of a decimal SI prefix.
pub(crate) fn scale_of(prefix: &str) -> f64 {
    match prefix {
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Z" => 1e21,
        "Y" => 1e24,
        _ => 1.0,
    }
}

/// Parses one tqdm-style line; `None` when it is not one.
pub(crate) fn parse_tqdm(line: &str) -> Option<Reading> {
    let caps = bracket_re().captures_iter(line).last()?;
    let whole = caps.get(0)?;
    let token = caps.get(1)?.as_str().trim();
    let r = rate_re().captures(token)?;
    let num = r.get(1)?.as_str();
    let mut prefix = r.get(2).map_or("", |m| m.as_str());
    let inverse = r.get(3).is_some();
    let mut unit = r.get(4).map_or("", |m| m.as_str()).to_string();
    let per_s = r.get(5).is_some();
    if inverse == per_s {
        return None; // `2.5s/it` or `10it/s`, nothing else
    }
    if !prefix.is_empty() && unit.is_empty() {
        // `5.00k/s`: the letter was the unit, not a prefix.
        unit = prefix.to_string();
        prefix = "";
    }
    if unit.is_empty() {
        return None;
    }
    let rate_per_s = if num == "?" {
        None
    } else {
        let x: f64 = num.parse().ok()?;
        let x = x * scale_of(prefix);
        if inverse {
            (x > 0.0).then(|| 1.0 / x)
        } else {
            Some(x)
        }
    };
    let before = &line[..whole.start()];
    let counter = counter_re().captures(before);
    let total = counter
        .as_ref()
        .and_then(|c| c.get(3))
        .map(|m| m.as_str().to_string());
    let count = counter.and_then(|c| {
        let n = c.get(1)?.as_str();
        let exact = c.get(2).is_none_or(|m| m.as_str().is_empty()) && !n.contains('.');
        if exact {
            n.parse().ok()
        } else {
            None
        }
    });
    Some(Reading {
        count,
        total,
        rate_per_s,
        unit,
    })
}

/// A `--rate-regex`: its first capture group (or the group named `rate`) is the rate, in units per
/// second unless the match has a group named `inv` (then seconds per unit). A k/M/G suffix right
/// after the number is applied.
#[derive(Debug, Clone)]
pub struct RateRegex {
    re: Regex,
}

impl RateRegex {
    pub fn new(pattern: &str) -> Result<RateRegex, String> {
        let re = Regex::new(pattern).map_err(|e| {
            format!(
                "--rate-regex '{pattern}' is not a valid regex: {}",
                e.to_string().lines().last().unwrap_or("")
            )
        })?;
        if re.captures_len() < 2 {
            return Err(format!(
                "--rate-regex '{pattern}' needs a capture group around the number, e.g. '([0-9.]+) samples/s'"
            ));
        }
        Ok(RateRegex { re })
    }

    /// The rate in one line, if the regex matches and the group is a number.
    pub fn rate(&self, line: &str) -> Option<f64> {
        let c = self.re.captures(line)?;
        let m = c.name("rate").or_else(|| c.get(1))?;
        let text = m.as_str().trim();
        let (num, prefix) = match text.char_indices().last() {
            Some((i, ch)) if "kMGTPEZY".contains(ch) => (&text[..i], &text[i..]),
            _ => (text, ""),
        };
        let rest = &line[m.end()..];
        let prefix = if prefix.is_empty() {
            rest.chars()
                .next()
                .filter(|c| "kMGTPEZY".contains(*c))
                .map(|c| c.to_string())
                .unwrap_or_default()
        } else {
            prefix.to_string()
        };
        let x: f64 = num.parse().ok()?;
        let x = x * scale_of(&prefix);
        if !x.is_finite() || x < 0.0 {
            return None;
        }
        if c.name("inv").is_some() {
            (x > 0.0).then(|| 1.0 / x)
        } else {
            Some(x)
        }
    }
}

/// Splits a byte stream into lines on `\r` and `\n`, keeping a partial line between reads.
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    partial: Vec<u8>,
}

impl LineSplitter {
    /// Feeds bytes; calls `line` for each complete non-empty line.
    pub(crate) fn feed(&mut self, bytes: &[u8], mut line: impl FnMut(&str)) {
        for &b in bytes {
            if b == b'\n' || b == b'\r' {
                if !self.partial.is_empty() {
                    line(&String::from_utf8_lossy(&self.partial));
                    self.partial.clear();
                }
            } else if self.partial.len() < 64 * 1024 {
                self.partial.push(b);
            }
        }
    }
    /// The last partial line at end of stream.
    pub(crate) fn finish(&mut self, mut line: impl FnMut(&str)) {
        if !self.partial.is_empty() {
            line(&String::from_utf8_lossy(&self.partial));
            self.partial.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines printed by tqdm 4.70.1 (captured from real runs and `tqdm.format_meter`).
    const BAR: &str = "100%|##########| 30/30 [00:00<00:00, 78.55it/s]";
    const BAR_FIRST: &str = "  3%|3         | 1/30 [00:00<00:00, 98.83it/s]";
    const NO_TOTAL: &str = "30it [00:00, 79.00it/s]";
    const UNIT_SCALE: &str = "12.3kimg [00:03, 4.12kimg/s]";
    const SLOW: &str = " 30%|███       | 3/10 [00:07<00:17,  2.50s/it]";
    const SAMPLES: &str = " 10%|█         | 640/6400 [00:05<00:45, 128.00samples/s, loss=0.512]";
    const DESC: &str = "Epoch 1:  45%|████▌     | 45/100 [00:04<00:05, 10.07it/s]";
    const MEGA: &str = " 25%|██▌       | 2.38M/9.54M [00:01<00:03, 2.50MB/s]";
    const START: &str = "  0%|          | 0/100 [00:00<?, ?it/s]";
    const INV_SCALED: &str = " 20%|██        | 2.00/10.0 [00:05<00:20, 2.50s/it]";
    const HOURS: &str =
        "Training: 12%|█▏ | 1200/10000 [1:02:03<7:34:12,  3.10it/s, loss=1.23, lr=3e-4]";

    type Got = Option<(Option<u64>, Option<f64>, String)>;

    fn r(count: Option<u64>, rate: Option<f64>, unit: &str) -> Got {
        Some((count, rate, unit.into()))
    }

    fn parse(line: &str) -> Got {
        parse_tqdm(line).map(|r| (r.count, r.rate_per_s, r.unit))
    }

    #[test]
    fn real_tqdm_lines() {
        assert_eq!(parse(BAR), r(Some(30), Some(78.55), "it"));
        assert_eq!(parse(BAR_FIRST), r(Some(1), Some(98.83), "it"));
        assert_eq!(parse(NO_TOTAL), r(Some(30), Some(79.0), "it"));
        let u = parse_tqdm(UNIT_SCALE).unwrap();
        assert_eq!((u.count, u.unit.as_str()), (None, "img"));
        assert!((u.rate_per_s.unwrap() - 4120.0).abs() < 1e-6);
        assert_eq!(parse(SLOW), r(Some(3), Some(0.4), "it"));
        assert_eq!(parse(SAMPLES), r(Some(640), Some(128.0), "samples"));
        assert_eq!(parse(DESC), r(Some(45), Some(10.07), "it"));
        let m = parse_tqdm(MEGA).unwrap();
        assert_eq!((m.count, m.unit.as_str()), (None, "B"));
        assert!((m.rate_per_s.unwrap() - 2.5e6).abs() < 1e-3);
        assert_eq!(parse(START), r(Some(0), None, "it"));
        assert_eq!(parse(INV_SCALED), r(None, Some(0.4), "it"));
        assert_eq!(parse(HOURS), r(Some(1200), Some(3.10), "it"));
        assert_eq!(parse_tqdm(DESC).unwrap().total.as_deref(), Some("100"));
        assert_eq!(parse_tqdm(NO_TOTAL).unwrap().total, None);
    }

    #[test]
    fn ordinary_lines_are_not_progress() {
        for l in [
            "",
            "epoch 1 loss 0.5",
            "[INFO] starting",
            "[12:00:01] step 10",
            "time [00:01, fast]",
            "Traceback (most recent call last):",
        ] {
            assert_eq!(parse_tqdm(l), None, "{l}");
        }
    }

    #[test]
    fn splitter_handles_carriage_returns_across_reads() {
        let mut sp = LineSplitter::default();
        let mut got = Vec::new();
        sp.feed(b"  0%| 0/3 [00:00<?, ?it/s]\r 33%| 1/3 [00:0", |l| {
            got.push(l.to_string())
        });
        sp.feed(b"0<00:00, 9.00it/s]\r\nTraceback\n", |l| {
            got.push(l.to_string())
        });
        sp.feed(b"OOM", |l| got.push(l.to_string()));
        sp.finish(|l| got.push(l.to_string()));
        assert_eq!(
            got,
            [
                "  0%| 0/3 [00:00<?, ?it/s]",
                " 33%| 1/3 [00:00<00:00, 9.00it/s]",
                "Traceback",
                "OOM"
            ]
        );
    }

    #[test]
    fn rate_regex() {
        let re = RateRegex::new(r"throughput: ([0-9.]+) samples/s").unwrap();
        assert_eq!(re.rate("step 10 throughput: 512.5 samples/s"), Some(512.5));
        assert_eq!(re.rate("nothing"), None);
        let re = RateRegex::new(r"([0-9.]+)k? tok/s").unwrap();
        assert_eq!(re.rate("1.5k tok/s"), Some(1500.0));
        let re = RateRegex::new(r"(?P<inv>)(?P<rate>[0-9.]+) s/step").unwrap();
        assert_eq!(re.rate("0.25 s/step"), Some(4.0));
        assert!(RateRegex::new("no group").is_err());
        assert!(RateRegex::new("(unclosed").is_err());
    }
}
