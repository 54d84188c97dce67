//! Kubernetes resource quantities (`16`, `500m`, `64Gi`, `1e3`) read as
//! numbers, for limits and capacities written in our CRDs.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The pattern the API server enforces on quantities (as Karpenter's CRDs
/// spell it): a signed decimal with an optional binary-SI, decimal-SI or
/// exponent suffix.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A string that is not a Kubernetes quantity, or one whose value does not
/// fit in a finite number (`1e400`, `-1e400`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {:?}{}", .0, explain(.0))]
pub struct QuantityError(pub String);

/// The end of [`QuantityError`]'s message: out of range, or what a quantity
/// looks like.
fn explain(s: &str) -> &'static str {
    if parse_unchecked(s).is_some() {
        ": out of range (its value is not a finite number)"
    } else {
        " (expected e.g. \"16\", \"500m\", \"64Gi\", \"1.5\")"
    }
}

/// Parses a Kubernetes quantity into its value: `"500m"` is 0.5, `"64Gi"` is
/// 68719476736, `"1e3"` is 1000.
///
/// # Errors
///
/// [`QuantityError`] when `s` does not follow the quantity grammar, or its
/// value overflows (`1e400` is not infinity: an infinite or wrapped limit
/// would be no limit at all).
pub fn parse_quantity(s: &str) -> Result<f64, QuantityError> {
    match parse_unchecked(s) {
        Some(v) if v.is_finite() => Ok(v),
        _ => Err(QuantityError(s.to_string())),
    }
}

/// The value of a syntactically valid quantity, possibly infinite.
fn parse_unchecked(s: &str) -> Option<f64> {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let negative = s.starts_with('-');
    let number_len = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(number_len);
    if !is_decimal(number) {
        return None;
    }
    let mantissa: f64 = number.parse().ok()?;
    let multiplier = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => {
            let e = &exp[1..];
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if !is_decimal(digits) {
                return None;
            }
            10f64.powf(e.parse::<f64>().ok()?)
        }
        _ => return None,
    };
    let v = mantissa * multiplier;
    Some(if negative { -v } else { v })
}

/// The value of a [`Quantity`]; see [`parse_quantity`].
///
/// # Errors
///
/// [`QuantityError`] when the quantity is malformed.
pub fn quantity_value(q: &Quantity) -> Result<f64, QuantityError> {
    parse_quantity(&q.0)
}

/// `12`, `1.5`, `1.`, `.5`, but not `.` or the empty string.
fn is_decimal(s: &str) -> bool {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    (!whole.is_empty() || !frac.is_empty())
        && whole.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_plain_decimal_and_binary_suffixes() {
        assert_eq!(parse_quantity("16"), Ok(16.0));
        assert_eq!(parse_quantity("500m"), Ok(0.5));
        assert_eq!(parse_quantity("1.5"), Ok(1.5));
        assert_eq!(parse_quantity("2k"), Ok(2000.0));
        assert_eq!(parse_quantity("64Gi"), Ok(68_719_476_736.0));
        assert_eq!(parse_quantity("1Ki"), Ok(1024.0));
        assert_eq!(parse_quantity("1e3"), Ok(1000.0));
        assert_eq!(parse_quantity("1E3"), Ok(1000.0));
        assert_eq!(parse_quantity("-2"), Ok(-2.0));
        assert_eq!(parse_quantity(".5"), Ok(0.5));
        assert_eq!(parse_quantity("1E"), Ok(1e18));
    }

    #[test]
    fn values_beyond_a_finite_number_are_out_of_range_not_infinite() {
        for big in ["1e400", "-1e400", "1e309", "+1E999"] {
            let e = parse_quantity(big).unwrap_err();
            assert!(e.to_string().contains("out of range"), "{e}");
        }
        assert_eq!(parse_quantity("1e308"), Ok(1e308));
        assert!(QuantityError("abc".into())
            .to_string()
            .contains("expected e.g."));
    }

    #[test]
    fn rejects_what_kubernetes_rejects() {
        for bad in [
            "", "abc", "1.2.3", "5 Gi", "5GB", "5gi", ".", "1e", "1ee3", "$5",
        ] {
            assert!(parse_quantity(bad).is_err(), "{bad}");
        }
    }
}
