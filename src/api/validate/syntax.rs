//! Syntax of names and values in NodePools: Kubernetes qualified names,
//! label values and DNS names, plain numbers, MIG profile names, and
//! spelling suggestions.

/// The IANA name closest to a misspelled one (at most two edits away).
pub(super) fn closest_time_zone(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    chrono_tz::TZ_VARIANTS
        .iter()
        .map(|tz| (distance(&tz.name().to_ascii_lowercase(), &lower), tz.name()))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, n)| n)
}

/// Levenshtein distance.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// `250`, `99.5`: digits with at most one inner decimal point.
pub(super) fn is_plain_number(s: &str) -> bool {
    let (whole, frac) = s.split_once('.').unwrap_or((s, "0"));
    !whole.is_empty()
        && !frac.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// `1g.10gb`: compute slices 1..=7, memory in GB.
pub(super) fn is_mig_profile_name(s: &str) -> bool {
    let Some((g, mem)) = s.split_once("g.") else {
        return false;
    };
    let Some(gb) = mem.strip_suffix("gb") else {
        return false;
    };
    matches!(g, "1" | "2" | "3" | "4" | "5" | "6" | "7")
        && !gb.is_empty()
        && gb.bytes().all(|b| b.is_ascii_digit())
}

/// A label key, taint key or resource name: `[prefix/]name`, the prefix a
/// DNS subdomain, the name at most 63 alphanumerics, `-`, `_`, `.`.
pub(crate) fn check_qualified_name(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        check_dns_subdomain(p).map_err(|m| format!("prefix of {s:?}: {m}"))?;
    }
    if name.is_empty() || name.len() > 63 {
        return Err(format!("name part of {s:?} must be 1 to 63 characters"));
    }
    if !is_label_value_chars(name) {
        return Err(format!(
            "name part of {s:?} must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        ));
    }
    Ok(())
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_`, `.`, starting
/// and ending with an alphanumeric.
pub(crate) fn check_label_value(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Ok(());
    }
    if s.len() > 63 {
        return Err("must be at most 63 characters".into());
    }
    if !is_label_value_chars(s) {
        return Err(
            "must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
                .into(),
        );
    }
    Ok(())
}

pub(super) fn is_label_value_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS subdomain (RFC 1123): at most 253 lowercase alphanumerics, `-`, `.`.
pub(super) fn check_dns_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err(format!("{s:?} must be 1 to 253 characters"));
    }
    if s.split('.').all(|part| check_dns_label(part).is_ok()) {
        Ok(())
    } else {
        Err(format!(
            "{s:?} must be lowercase alphanumerics, '-' or '.', starting and ending with an alphanumeric"
        ))
    }
}

/// A DNS label (RFC 1123): at most 63 lowercase alphanumerics or `-`,
/// starting and ending with an alphanumeric.
pub(super) fn check_dns_label(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} must be 1 to 63 lowercase alphanumerics or '-', starting and ending with an alphanumeric"
        ))
    }
}
