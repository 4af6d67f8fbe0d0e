//! The `rate = "N/unit"` grammar and the [`Rate`] it denotes.

use std::fmt;
use std::num::{NonZeroU32, NonZeroU64};
use std::str::FromStr;
use std::time::Duration;

/// `count` calls per period, with bursts up to `count`. Neither can be zero: a tool that must not run is
/// denied by the policy, not given a rate of nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: NonZeroU32,
    period_secs: NonZeroU64,
}

/// The units the grammar accepts, each with its short forms, and its length in seconds.
const UNITS: &[(&[&str], u64)] =
    &[(&["second", "sec", "s"], 1), (&["minute", "min", "m"], 60), (&["hour", "h"], 3_600), (&["day", "d"], 86_400)];

const EXPECTED_UNITS: &str = "`second`, `minute`, `hour`, `day`";

impl Rate {
    /// `count` calls per `period_secs` seconds.
    pub const fn new(count: NonZeroU32, period_secs: NonZeroU64) -> Rate {
        Rate { count, period_secs }
    }

    /// Calls allowed per period.
    pub const fn count(&self) -> u32 {
        self.count.get()
    }

    /// The period, in seconds.
    pub const fn period_secs(&self) -> u64 {
        self.period_secs.get()
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        Duration::from_secs(self.period_secs.get())
    }

    /// Whether `self` admits no more than `other` does over any window (the stricter of two).
    pub fn is_at_least_as_strict_as(&self, other: &Rate) -> bool {
        u128::from(self.count()) * u128::from(other.period_secs())
            <= u128::from(other.count()) * u128::from(self.period_secs())
    }
}

/// The canonical spelling, which parses back to the same rate (`10/minute`); a period that is no unit is
/// written in seconds (`5/90s`) and does not parse.
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period_secs() {
            1 => "second",
            60 => "minute",
            3_600 => "hour",
            86_400 => "day",
            other => return write!(f, "{}/{other}s", self.count),
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// A rate text that does not parse; its `Display` is the complete, user-facing message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateParseError {
    /// No `/` between count and unit.
    Malformed {
        /// The whole text.
        text: String,
    },
    /// The count is not a whole number.
    NotANumber {
        /// The count as written.
        count: String,
    },
    /// The count does not fit in a `u32`.
    TooLarge {
        /// The count as written.
        count: String,
    },
    /// The count is zero.
    Zero,
    /// Nothing after the `/`.
    NoUnit {
        /// The whole text.
        text: String,
    },
    /// A unit the grammar does not know.
    UnknownUnit {
        /// The unit as written.
        unit: String,
    },
}

impl fmt::Display for RateParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RateParseError::Malformed { text } => {
                write!(f, "malformed rate `{text}`, expected `N/unit` such as `10/minute`")
            }
            RateParseError::NotANumber { count } => {
                write!(f, "rate count `{count}` is not a whole number, expected `N/unit` such as `10/minute`")
            }
            RateParseError::TooLarge { count } => {
                write!(f, "rate count `{count}` is too large, the largest is `{}`", u32::MAX)
            }
            RateParseError::Zero => {
                f.write_str("rate count must be at least 1; to forbid a tool, deny it in the policy")
            }
            RateParseError::NoUnit { text } => write!(f, "rate `{text}` has no unit, expected one of {EXPECTED_UNITS}"),
            RateParseError::UnknownUnit { unit } => {
                write!(f, "unknown rate unit `{unit}`, expected one of {EXPECTED_UNITS}")
            }
        }
    }
}

impl std::error::Error for RateParseError {}

impl FromStr for Rate {
    type Err = RateParseError;

    /// `"10/minute"`; units `second`, `minute`, `hour`, `day` (or `s`, `sec`, `m`, `min`, `h`, `d`); spaces
    /// around the count and the unit are allowed.
    fn from_str(text: &str) -> Result<Rate, RateParseError> {
        let Some((count, unit)) = text.split_once('/') else {
            return Err(RateParseError::Malformed { text: text.to_owned() });
        };
        let (count, unit) = (count.trim(), unit.trim());
        if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
            return Err(RateParseError::NotANumber { count: count.to_owned() });
        }
        let count: u32 = count.parse().map_err(|_| RateParseError::TooLarge { count: count.to_owned() })?;
        let count = NonZeroU32::new(count).ok_or(RateParseError::Zero)?;
        if unit.is_empty() {
            return Err(RateParseError::NoUnit { text: text.to_owned() });
        }
        let period_secs = UNITS
            .iter()
            .find(|(names, _)| names.contains(&unit))
            .and_then(|(_, seconds)| NonZeroU64::new(*seconds))
            .ok_or_else(|| RateParseError::UnknownUnit { unit: unit.to_owned() })?;
        Ok(Rate { count, period_secs })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;

    fn rate(count: u32, period_secs: u64) -> Rate {
        Rate::new(NonZeroU32::new(count).unwrap(), NonZeroU64::new(period_secs).unwrap())
    }

    #[test]
    fn accepts_every_unit_and_short_form() {
        assert_eq!("10/minute".parse(), Ok(rate(10, 60)));
        assert_eq!("1/s".parse(), Ok(rate(1, 1)));
        assert_eq!("1/sec".parse(), Ok(rate(1, 1)));
        assert_eq!("3/hour".parse(), Ok(rate(3, 3_600)));
        assert_eq!("3/h".parse(), Ok(rate(3, 3_600)));
        assert_eq!("2 / day".parse(), Ok(rate(2, 86_400)));
        assert_eq!("5/m".parse(), Ok(rate(5, 60)));
        assert_eq!("4294967295/sec".parse(), Ok(rate(u32::MAX, 1)));
    }

    #[test]
    fn rejects_each_malformed_rate_with_its_own_message() {
        let err = |t: &str| t.parse::<Rate>().expect_err("malformed").to_string();
        assert_eq!(err("ten/minute"), "rate count `ten` is not a whole number, expected `N/unit` such as `10/minute`");
        assert!(err("-1/minute").contains("not a whole number"));
        assert!(err("/minute").contains("not a whole number"));
        assert_eq!(err("0/minute"), "rate count must be at least 1; to forbid a tool, deny it in the policy");
        assert_eq!(
            err("5/fortnight"),
            "unknown rate unit `fortnight`, expected one of `second`, `minute`, `hour`, `day`"
        );
        assert_eq!(err("5/"), "rate `5/` has no unit, expected one of `second`, `minute`, `hour`, `day`");
        assert_eq!(err("5"), "malformed rate `5`, expected `N/unit` such as `10/minute`");
        assert_eq!(err("4294967296/minute"), "rate count `4294967296` is too large, the largest is `4294967295`");
        assert!(err("5/Minute").contains("unknown rate unit `Minute`"));
    }

    #[test]
    fn displays_the_canonical_spelling() {
        assert_eq!("10/min".parse::<Rate>().unwrap().to_string(), "10/minute");
        assert_eq!(rate(5, 90).to_string(), "5/90s");
        for text in ["1/second", "2/minute", "3/hour", "4/day"] {
            assert_eq!(text.parse::<Rate>().unwrap().to_string(), text);
        }
    }

    #[test]
    fn strictness_compares_rates_per_time() {
        let per_min = |n| rate(n, 60);
        assert!(per_min(5).is_at_least_as_strict_as(&per_min(10)));
        assert!(!per_min(10).is_at_least_as_strict_as(&per_min(5)));
        assert!(per_min(5).is_at_least_as_strict_as(&per_min(5)));
        assert!(rate(1, 1).is_at_least_as_strict_as(&per_min(60)));
        assert!(!rate(2, 1).is_at_least_as_strict_as(&per_min(60)));
    }
}
