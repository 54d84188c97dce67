//! Garbage collection of launch templates. A template's name is a hash of
//! its content (`template`), so every change of AMI, user data (labels,
//! taints), security groups or volume size leaves the old template behind;
//! left alone they pile up to EC2's per-region quota and launches fail.
//! A template is deleted when it carries our cluster tag, is older than the
//! grace period, no pending or running instance of ours was launched from
//! it, and no launch of this process used it within the grace period.
//! Instances are collected by the generic `cloud::collect_garbage`, which
//! calls this through `CloudProvider::collect_unused_resources`.

use super::{poisoned, step, AwsCloud, TAG_LAUNCH_TEMPLATE};
use crate::cloud::{Error, Result};
use crate::core::Time;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{Filter, LaunchTemplate};
use std::collections::HashSet;

/// What [`Step`](super::super::errors::Step) errors name as the object.
const WHAT: &str = "launch template garbage collection";

/// The tag EC2 itself puts on an instance launched from a template (its
/// ID): it spares the templates of instances launched before we tagged
/// them with [`TAG_LAUNCH_TEMPLATE`].
const EC2_TEMPLATE_ID_TAG: &str = "aws:ec2launchtemplate:id";

impl AwsCloud {
    /// Deletes our unused launch templates (see the module doc) and returns
    /// their names. One failed delete does not stop the others; it is
    /// returned beside.
    ///
    /// # Errors
    /// Listing the templates or the instances failed.
    pub async fn collect_launch_templates(
        &self,
        now: Time,
        grace: chrono::TimeDelta,
    ) -> Result<(Vec<String>, Vec<Error>)> {
        let templates = self.our_launch_templates().await?;
        if templates.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let in_use = self.launch_templates_in_use().await?;
        let recently_used: HashSet<String> = self
            .templates
            .lock()
            .map_err(|_| poisoned())?
            .iter()
            .filter(|(_, used)| now - **used <= grace)
            .map(|(name, _)| name.clone())
            .collect();
        let (mut deleted, mut failed) = (Vec::new(), Vec::new());
        for t in templates {
            let (Some(id), Some(name)) = (t.launch_template_id(), t.launch_template_name()) else {
                continue;
            };
            let created = t
                .create_time()
                .and_then(|c| chrono::DateTime::from_timestamp(c.secs(), c.subsec_nanos()));
            let young = created.is_none_or(|c| now - c <= grace);
            if young || in_use.contains(id) || in_use.contains(name) || recently_used.contains(name)
            {
                continue;
            }
            match self
                .ec2
                .delete_launch_template()
                .launch_template_id(id)
                .send()
                .await
            {
                Ok(_) => {}
                Err(e) if e.code() == Some("InvalidLaunchTemplateId.NotFound") => {}
                Err(e) => {
                    failed.push(step("DeleteLaunchTemplate", WHAT).sdk_error(&e));
                    continue;
                }
            }
            self.templates.lock().map_err(|_| poisoned())?.remove(name);
            tracing::info!(
                template = name,
                id,
                "deleted a launch template no instance uses"
            );
            deleted.push(name.to_string());
        }
        Ok((deleted, failed))
    }

    /// The launch templates carrying our cluster tag.
    async fn our_launch_templates(&self) -> Result<Vec<LaunchTemplate>> {
        let pages: Vec<_> = self
            .ec2
            .describe_launch_templates()
            .filters(self.cluster_filter())
            .into_paginator()
            .send()
            .collect()
            .await;
        let mut out = Vec::new();
        for page in pages {
            let page = page.map_err(|e| step("DescribeLaunchTemplates", WHAT).sdk_error(&e))?;
            out.extend(page.launch_templates().iter().cloned());
        }
        Ok(out)
    }

    /// Names and IDs of the launch templates our pending and running
    /// instances were launched from.
    async fn launch_templates_in_use(&self) -> Result<HashSet<String>> {
        self.live_instance_tags(&[TAG_LAUNCH_TEMPLATE, EC2_TEMPLATE_ID_TAG], WHAT)
            .await
    }

    /// The values of tags `keys` on our pending and running instances
    /// (`what` names the caller in errors).
    pub(super) async fn live_instance_tags(
        &self,
        keys: &[&str],
        what: &str,
    ) -> Result<HashSet<String>> {
        let alive = Filter::builder()
            .name("instance-state-name")
            .values("pending")
            .values("running")
            .build();
        let pages: Vec<_> = self
            .ec2
            .describe_instances()
            .filters(self.cluster_filter())
            .filters(alive)
            .into_paginator()
            .send()
            .collect()
            .await;
        let mut used = HashSet::new();
        for page in pages {
            let page = page.map_err(|e| step("DescribeInstances", what).sdk_error(&e))?;
            let tags = page
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .flat_map(|i| i.tags());
            for t in tags {
                if let (Some(k), Some(v)) = (t.key(), t.value()) {
                    if keys.contains(&k) {
                        used.insert(v.to_string());
                    }
                }
            }
        }
        Ok(used)
    }
}
