//! Availability zone names: which name (`us-east-1a`) an account gives each
//! zone ID (`use1-az4`). Zone IDs name the same place in every account;
//! names do not (EC2 shuffles the letters per account in the older
//! regions). The catalog, the planner and NodeClaims reason in zone IDs;
//! nodes carry the name in `topology.kubernetes.io/zone` (as EKS, the AWS
//! cloud-controller-manager and EBS CSI volume affinities have it) and the
//! ID in `topology.k8s.aws/zone-id`.
//!
//! The mapping is data the pure core receives with the catalog. The
//! controller fills it from `ec2:DescribeAvailabilityZones`, refreshed with
//! the prices; offline commands and the simulator use [`default_name`]
//! unless told otherwise (`plan --zone-names`, a scenario's `zoneNames`).

use std::collections::BTreeMap;

/// Zone names by zone ID, per region, as one account maps them. In a
/// region it maps, a zone it does not list is named by its ID (so that two
/// zones never share a name); a region it does not map is named by
/// [`default_name`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZoneNames {
    /// Region -> zone ID -> zone name.
    by_region: BTreeMap<String, BTreeMap<String, String>>,
}

/// The name a zone ID gets by the default rule: the ID `<short>-az<N>`
/// (`use1-az4`) is named the region followed by the N-th letter
/// (`us-east-1d`): `az1` is `a`, `az2` is `b`, and so on. `None` for an ID
/// of another form (a Local Zone's `use1-bos1-az1`), a number beyond `z`
/// or no region.
pub fn default_name(region: &str, zone_id: &str) -> Option<String> {
    let (short, n) = zone_id.rsplit_once("-az")?;
    if region.is_empty() || short.is_empty() || short.contains('-') {
        return None;
    }
    let n: u8 = n.parse().ok().filter(|n| (1..=26).contains(n))?;
    Some(format!("{region}{}", char::from(b'a' + n - 1)))
}

impl ZoneNames {
    /// No zone mapped: every zone is named by [`default_name`].
    pub fn new() -> ZoneNames {
        ZoneNames::default()
    }

    /// The same mapping with `region`'s zones named by `pairs` (zone name,
    /// zone ID), in place of any it had for that region.
    #[must_use]
    pub fn with_region(
        mut self,
        region: &str,
        pairs: impl IntoIterator<Item = (String, String)>,
    ) -> ZoneNames {
        let zones = pairs.into_iter().map(|(name, id)| (id, name)).collect();
        self.by_region.insert(region.to_string(), zones);
        self
    }

    /// The regions mapped explicitly.
    pub fn regions(&self) -> impl Iterator<Item = &str> {
        self.by_region.keys().map(String::as_str)
    }

    /// The (zone name, zone ID) pairs mapped explicitly for `region`, by ID.
    pub fn pairs(&self, region: &str) -> Vec<(&str, &str)> {
        self.by_region
            .get(region)
            .into_iter()
            .flatten()
            .map(|(id, name)| (name.as_str(), id.as_str()))
            .collect()
    }

    /// The name of zone `zone_id` of `region`: the mapped one; in a region
    /// not mapped, the [`default_name`]; else the ID itself (a zone with no
    /// name known).
    pub fn name_of(&self, region: &str, zone_id: &str) -> String {
        match self.by_region.get(region) {
            Some(zones) => zones.get(zone_id).cloned(),
            None => default_name(region, zone_id),
        }
        .unwrap_or_else(|| zone_id.to_string())
    }

    /// The zone ID that `name` names in `region`: the mapped one; in a
    /// region not mapped, the one among `known_ids` (the region's zone IDs)
    /// whose [`default_name`] it is; else `None`.
    pub fn id_of<'a>(
        &self,
        region: &str,
        name: &str,
        known_ids: impl IntoIterator<Item = &'a str>,
    ) -> Option<String> {
        match self.by_region.get(region) {
            Some(zones) => zones
                .iter()
                .find(|(_, n)| *n == name)
                .map(|(id, _)| id.clone()),
            None => known_ids
                .into_iter()
                .find(|id| default_name(region, id).as_deref() == Some(name))
                .map(str::to_string),
        }
    }

    /// Reads `NAME=ID` pairs separated by commas (`us-east-1a=use1-az6,
    /// us-east-1b=use1-az1`), the form of `plan --zone-names`, as the
    /// names of `region`'s zones.
    ///
    /// # Errors
    /// Names a pair that is not `NAME=ID`, or a name or ID given twice.
    pub fn parse_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((name, id)) = item.split_once('=') else {
                return Err(format!(
                    "{item:?} is not NAME=ID (e.g. us-east-1a=use1-az6)"
                ));
            };
            let (name, id) = (name.trim(), id.trim());
            if name.is_empty() || id.is_empty() {
                return Err(format!(
                    "{item:?} is not NAME=ID (e.g. us-east-1a=use1-az6)"
                ));
            }
            if pairs.iter().any(|(n, i)| n == name || i == id) {
                return Err(format!("{item:?}: the name or the ID is given twice"));
            }
            pairs.push((name.to_string(), id.to_string()));
        }
        Ok(pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_rule_names_az_n_by_the_nth_letter_of_the_region() {
        assert_eq!(default_name("us-east-1", "use1-az1").unwrap(), "us-east-1a");
        assert_eq!(default_name("us-east-1", "use1-az4").unwrap(), "us-east-1d");
        assert_eq!(
            default_name("ap-northeast-1", "apne1-az4").unwrap(),
            "ap-northeast-1d"
        );
        assert_eq!(default_name("us-east-1", "use1-bos1-az1"), None);
        assert_eq!(default_name("us-east-1", "use1-az0"), None);
        assert_eq!(default_name("us-east-1", "use1-az27"), None);
        assert_eq!(default_name("us-east-1", "nonsense"), None);
        assert_eq!(default_name("", "use1-az1"), None);
    }

    #[test]
    fn an_accounts_mapping_overrides_the_default_for_its_region_only() {
        let z = ZoneNames::new().with_region(
            "us-east-1",
            [
                ("us-east-1a".to_string(), "use1-az6".to_string()),
                ("us-east-1d".to_string(), "use1-az4".to_string()),
            ],
        );
        assert_eq!(z.name_of("us-east-1", "use1-az6"), "us-east-1a");
        assert_eq!(z.name_of("us-east-1", "use1-az4"), "us-east-1d");
        // Not in the account's list: its ID, never a name another zone has.
        assert_eq!(z.name_of("us-east-1", "use1-az1"), "use1-az1");
        // Another region: the default rule.
        assert_eq!(z.name_of("us-west-2", "usw2-az1"), "us-west-2a");
        assert_eq!(
            ZoneNames::new().name_of("us-east-1", "use1-bos1-az1"),
            "use1-bos1-az1"
        );
        let ids = ["use1-az1", "use1-az4", "use1-az6"];
        assert_eq!(z.id_of("us-east-1", "us-east-1a", ids).unwrap(), "use1-az6");
        assert_eq!(z.id_of("us-east-1", "us-east-1b", ids), None);
        assert_eq!(
            ZoneNames::new()
                .id_of("us-east-1", "us-east-1a", ids)
                .unwrap(),
            "use1-az1"
        );
    }

    #[test]
    fn zone_name_pairs_parse_and_mistakes_are_named() {
        assert_eq!(
            ZoneNames::parse_pairs("us-east-1a=use1-az6, us-east-1b=use1-az1").unwrap(),
            [
                ("us-east-1a".to_string(), "use1-az6".to_string()),
                ("us-east-1b".to_string(), "use1-az1".to_string())
            ]
        );
        assert!(ZoneNames::parse_pairs("us-east-1a")
            .unwrap_err()
            .contains("NAME=ID"));
        assert!(
            ZoneNames::parse_pairs("us-east-1a=use1-az6,us-east-1a=use1-az1")
                .unwrap_err()
                .contains("twice")
        );
    }
}
