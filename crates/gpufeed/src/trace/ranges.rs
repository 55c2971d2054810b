//! Sorted, non-overlapping interval lists (half-open `[start, end)` in µs) and the set
//! operations the TensorBoard plugin's step breakdown is built from.

pub(crate) type Range = (f64, f64);

/// Sorts and merges touching/overlapping ranges (the plugin's `merge_ranges`).
pub(crate) fn merge(mut r: Vec<Range>) -> Vec<Range> {
    r.retain(|x| x.0.is_finite() && x.1.is_finite());
    r.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut out: Vec<Range> = Vec::with_capacity(r.len());
    for (s, e) in r {
        match out.last_mut() {
            Some(last) if s <= last.1 => {
                if e > last.1 {
                    last.1 = e;
                }
            }
            _ => out.push((s, e)),
        }
    }
    out
}

/// Merges in place when a list grows large, to bound memory on huge traces.
pub(crate) fn compact(r: &mut Vec<Range>) {
    let v = std::mem::take(r);
    *r = merge(v);
}

/// Intersection of two merged lists.
pub(crate) fn intersect(a: &[Range], b: &[Range]) -> Vec<Range> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        let s = a[i].0.max(b[j].0);
        let e = a[i].1.min(b[j].1);
        if s < e {
            out.push((s, e));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// `a` minus `b`, both merged.
pub(crate) fn subtract(a: &[Range], b: &[Range]) -> Vec<Range> {
    let mut out = Vec::new();
    let mut j = 0;
    for &(s, e) in a {
        let mut cur = s;
        while j < b.len() && b[j].1 <= cur {
            j += 1;
        }
        let mut k = j;
        while k < b.len() && b[k].0 < e {
            if b[k].0 > cur {
                out.push((cur, b[k].0));
            }
            cur = cur.max(b[k].1);
            k += 1;
        }
        if cur < e {
            out.push((cur, e));
        }
    }
    out
}

pub(crate) fn total(r: &[Range]) -> f64 {
    r.iter().map(|(s, e)| e - s).sum::<f64>() + 0.0 // an empty sum is -0.0
}

/// Total length of `r` inside the single window `[s, e)`; `r` merged.
pub(crate) fn total_within(r: &[Range], s: f64, e: f64) -> f64 {
    let start = r.partition_point(|x| x.1 <= s);
    let mut t = 0.0;
    for x in &r[start..] {
        if x.0 >= e {
            break;
        }
        let a = x.0.max(s);
        let b = x.1.min(e);
        if b > a {
            t += b - a;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let a = merge(vec![(5.0, 7.0), (0.0, 2.0), (1.0, 3.0)]);
        assert_eq!(a, vec![(0.0, 3.0), (5.0, 7.0)]);
        let b = vec![(2.0, 6.0)];
        assert_eq!(intersect(&a, &b), vec![(2.0, 3.0), (5.0, 6.0)]);
        assert_eq!(subtract(&a, &b), vec![(0.0, 2.0), (6.0, 7.0)]);
        assert_eq!(total(&a), 5.0);
        assert_eq!(total_within(&a, 1.0, 6.0), 3.0);
        assert!(merge(vec![(f64::NAN, 1.0)]).is_empty());
    }
}
