//! The `rate = "N/unit"` grammar, checked at compile time.

/// A parsed rate: `count` calls per `unit_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rate {
    pub(crate) count: u32,
    pub(crate) unit_seconds: u64,
}

const UNITS: &[(&[&str], u64)] =
    &[(&["second", "sec", "s"], 1), (&["minute", "min", "m"], 60), (&["hour", "h"], 3_600), (&["day", "d"], 86_400)];

const EXPECTED_UNITS: &str = "`second`, `minute`, `hour`, `day`";

/// Parses `"10/minute"`; the error is a complete, user-facing message.
pub(crate) fn parse(text: &str) -> Result<Rate, String> {
    let Some((count, unit)) = text.split_once('/') else {
        return Err(format!("malformed rate `{text}`, expected `N/unit` such as `10/minute`"));
    };
    let (count, unit) = (count.trim(), unit.trim());
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("rate count `{count}` is not a whole number, expected `N/unit` such as `10/minute`"));
    }
    let count: u32 =
        count.parse().map_err(|_| format!("rate count `{count}` is too large, the largest is `{}`", u32::MAX))?;
    if count == 0 {
        return Err("rate count must be at least 1; to forbid a tool, deny it in the policy".into());
    }
    if unit.is_empty() {
        return Err(format!("rate `{text}` has no unit, expected one of {EXPECTED_UNITS}"));
    }
    let unit_seconds = UNITS
        .iter()
        .find(|(names, _)| names.contains(&unit))
        .map(|(_, seconds)| *seconds)
        .ok_or_else(|| format!("unknown rate unit `{unit}`, expected one of {EXPECTED_UNITS}"))?;
    Ok(Rate { count, unit_seconds })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_unit_and_short_form() {
        assert_eq!(parse("10/minute"), Ok(Rate { count: 10, unit_seconds: 60 }));
        assert_eq!(parse("1/s"), Ok(Rate { count: 1, unit_seconds: 1 }));
        assert_eq!(parse("3/hour"), Ok(Rate { count: 3, unit_seconds: 3_600 }));
        assert_eq!(parse("2 / day"), Ok(Rate { count: 2, unit_seconds: 86_400 }));
        assert_eq!(parse("4294967295/sec"), Ok(Rate { count: u32::MAX, unit_seconds: 1 }));
    }

    #[test]
    fn rejects_each_malformed_rate_with_its_own_message() {
        let err = |t| parse(t).expect_err("malformed");
        assert!(err("ten/minute").contains("not a whole number"), "{}", err("ten/minute"));
        assert!(err("-1/minute").contains("not a whole number"));
        assert!(err("0/minute").contains("at least 1"));
        assert_eq!(
            err("5/fortnight"),
            "unknown rate unit `fortnight`, expected one of `second`, `minute`, `hour`, `day`"
        );
        assert!(err("5/").contains("has no unit"));
        assert!(err("5").contains("expected `N/unit`"));
        assert!(err("4294967296/minute").contains("too large"));
        assert!(err("/minute").contains("not a whole number"));
    }
}
