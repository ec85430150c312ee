//! Order statistics of the load tools' samples: every quantile by nearest
//! rank, so that all the tools read their samples the same way.

/// The `p` quantile (0 to 1) of `sorted` by nearest rank; NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The median of `values`, in any order; NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5)
}

/// A sample, sorted once: its quantiles, median and largest value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample(Vec<f64>);

impl Sample {
    /// The sample of `values`, in any order.
    pub fn new(mut values: Vec<f64>) -> Sample {
        values.sort_by(f64::total_cmp);
        Sample(values)
    }

    /// The `p` quantile (0 to 1) by nearest rank; NaN when empty.
    pub fn quantile(&self, p: f64) -> f64 {
        percentile(&self.0, p)
    }

    /// The median; NaN when empty.
    pub fn median(&self) -> f64 {
        self.quantile(0.5)
    }

    /// The largest value; NaN when empty.
    pub fn max(&self) -> f64 {
        self.0.last().copied().unwrap_or(f64::NAN)
    }

    /// How many values.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds no value.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<f64> for Sample {
    fn from_iter<I: IntoIterator<Item = f64>>(values: I) -> Sample {
        Sample::new(values.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_the_nearest_rank() {
        let sorted = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&sorted, 0.0), 1.0);
        assert_eq!(percentile(&sorted, 0.5), 3.0);
        assert_eq!(percentile(&sorted, 0.99), 5.0);
        assert_eq!(percentile(&sorted, 1.0), 5.0);
        // (4 - 1) * 0.5 = 1.5 rounds away from zero: the upper middle.
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), 3.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn median_sorts_and_is_the_upper_middle_of_an_even_count() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        // The element at len / 2 of the sorted values, for any length.
        for len in 1..20 {
            let values: Vec<f64> = (0..len).rev().map(f64::from).collect();
            assert_eq!(median(&values), f64::from(len / 2));
        }
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn sample_sorts_once_and_reads_its_quantiles() {
        let s: Sample = [5.0, 1.0, 4.0, 2.0, 3.0].into_iter().collect();
        assert_eq!(s.len(), 5);
        assert_eq!(s.median(), 3.0);
        assert_eq!(s.quantile(0.99), 5.0);
        assert_eq!(s.quantile(0.0), 1.0);
        assert_eq!(s.max(), 5.0);
        let empty = Sample::default();
        assert!(empty.is_empty());
        assert!(empty.median().is_nan());
        assert!(empty.max().is_nan());
    }

    #[test]
    fn sample_orders_nan_last() {
        let s = Sample::new(vec![f64::NAN, 1.0, 2.0]);
        assert_eq!(s.quantile(0.0), 1.0);
        assert!(s.max().is_nan());
    }
}
