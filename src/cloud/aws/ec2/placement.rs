//! Cluster placement groups for EFA launches: a claim launched with EFA
//! interfaces goes into its NodePool's cluster placement group of its zone
//! (`quartermaster-<cluster>-<pool>-<zone>`), so that a gang's collectives
//! run over one network spine. The group is created on first use (tagged
//! with our cluster and NodePool, as the IAM policy demands) and deleted by
//! garbage collection once no live instance of ours carries its name
//! (`quartermaster.dev/placement-group` tag) and no launch of this process
//! used it within the grace period.

use super::{poisoned, step, AwsCloud};
use crate::api::labels as l;
use crate::cloud::{Error, Result};
use crate::core::Time;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{PlacementStrategy, ResourceType, Tag, TagSpecification};

/// Instance tag: the placement group the instance was launched into.
pub const TAG_PLACEMENT_GROUP: &str = "quartermaster.dev/placement-group";

/// What [`Step`](super::super::errors::Step) errors name as the object.
const WHAT: &str = "placement group garbage collection";

/// The placement group of `pool`'s EFA nodes in `zone` (EC2 allows 255
/// characters; names are ASCII here).
pub fn group_name(cluster: &str, pool: &str, zone: &str) -> String {
    let name = format!("quartermaster-{cluster}-{pool}-{zone}");
    name.chars().take(255).collect()
}

impl AwsCloud {
    /// Creates the cluster placement group `name` for `pool` unless it
    /// exists (created by an earlier launch, another replica, or a previous
    /// process: EC2's `InvalidPlacementGroup.Duplicate` is success), and
    /// records the use at `now`.
    ///
    /// # Errors
    /// EC2 refused or could not be reached (classified as for any call).
    pub(super) async fn ensure_placement_group(
        &self,
        claim: &str,
        name: &str,
        pool: &str,
        now: Time,
    ) -> Result<()> {
        let known = self
            .placement_groups
            .lock()
            .map_err(|_| poisoned())?
            .insert(name.to_string(), now)
            .is_some();
        if known {
            return Ok(());
        }
        let tags = [
            (l::TAG_CLUSTER, self.settings.cluster_name.as_str()),
            (l::NODEPOOL, pool),
        ]
        .map(|(k, v)| Tag::builder().key(k).value(v).build());
        let created = self
            .ec2
            .create_placement_group()
            .group_name(name)
            .strategy(PlacementStrategy::Cluster)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::PlacementGroup)
                    .set_tags(Some(tags.to_vec()))
                    .build(),
            )
            .send()
            .await;
        match created {
            Ok(_) => {
                tracing::info!(claim, group = name, "created cluster placement group");
                Ok(())
            }
            Err(e) if e.code() == Some("InvalidPlacementGroup.Duplicate") => Ok(()),
            Err(e) => {
                self.placement_groups
                    .lock()
                    .map_err(|_| poisoned())?
                    .remove(name);
                Err(step("CreatePlacementGroup", claim).sdk_error(&e))
            }
        }
    }

    /// Deletes our placement groups that no live instance of ours is in and
    /// no launch of this process used within `grace`; returns their names
    /// and the errors of deletes that failed.
    ///
    /// # Errors
    /// Listing the groups or the instances failed.
    pub async fn collect_placement_groups(
        &self,
        now: Time,
        grace: chrono::TimeDelta,
    ) -> Result<(Vec<String>, Vec<Error>)> {
        let listed = self
            .ec2
            .describe_placement_groups()
            .filters(self.cluster_filter())
            .send()
            .await
            .map_err(|e| step("DescribePlacementGroups", WHAT).sdk_error(&e))?;
        let names: Vec<String> = listed
            .placement_groups()
            .iter()
            .filter_map(|g| g.group_name().map(str::to_string))
            .collect();
        if names.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let in_use = self
            .live_instance_tags(&[TAG_PLACEMENT_GROUP], WHAT)
            .await?;
        let recent = |name: &str| -> Result<bool> {
            Ok(self
                .placement_groups
                .lock()
                .map_err(|_| poisoned())?
                .get(name)
                .is_some_and(|used| now - *used <= grace))
        };
        let (mut deleted, mut failed) = (Vec::new(), Vec::new());
        for name in names {
            if in_use.contains(&name) || recent(&name)? {
                continue;
            }
            match self
                .ec2
                .delete_placement_group()
                .group_name(&name)
                .send()
                .await
            {
                Ok(_) => {}
                Err(e) if e.code() == Some("InvalidPlacementGroup.Unknown") => {}
                Err(e) => {
                    failed.push(step("DeletePlacementGroup", WHAT).sdk_error(&e));
                    continue;
                }
            }
            self.placement_groups
                .lock()
                .map_err(|_| poisoned())?
                .remove(&name);
            tracing::info!(group = name, "deleted a placement group no instance uses");
            deleted.push(name);
        }
        Ok((deleted, failed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pools_group_is_named_for_cluster_pool_and_zone_within_ec2s_limit() {
        assert_eq!(
            group_name("prod", "train", "use1-az4"),
            "quartermaster-prod-train-use1-az4"
        );
        assert_eq!(group_name("c", &"p".repeat(300), "z").len(), 255);
    }
}
