//! The medians the engine and the layers above it share.

/// The median of `v` (sorted in place): the middle value, or the mean of the two middle values
/// of an even count; `None` when empty.
pub fn median(v: &mut [f64]) -> Option<f64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The upper median of `v` (sorted in place): the middle value, or the upper of the two middle
/// values of an even count; `None` when empty. For callers that need a value the data holds
/// (a sampling interval that was seen, a busy level a GPU was at), not a mean of two.
pub fn upper_median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// The lower median of `v` (sorted in place): the middle value, or the lower of the two middle
/// values of an even count; `None` when empty. For a threshold that an even count must not
/// lower by averaging in a larger value (the straggler rank's, against the median rank).
pub fn lower_median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[(v.len() - 1) / 2])
}
