//! EC2 launches: [`AwsCloud`] implements [`CloudProvider`] with launch
//! templates ([`template`]), `CreateFleet` ([`fleet`]), `DescribeInstances`
//! by ownership tag and `TerminateInstances`; garbage collection is the
//! generic [`crate::cloud::collect_garbage`] over [`AwsCloud`]'s
//! `instances()`, which lists only instances tagged with our cluster, and
//! unused launch templates are deleted by [`gc`].
//! Error codes are mapped in [`super::errors`]. Design note: `docs/aws.md`.

pub mod fleet;
pub mod gc;
pub mod placement;
pub mod reservations;
pub mod settings;
pub mod template;

use super::errors::Step;
use crate::api::labels as l;
use crate::api::nodeclass::SelectorTerm;
use crate::catalog::CapacityType;
use crate::cloud::{CloudProvider, Error, Instance, InstanceState, NodeTemplate, Result};
use crate::core::{ClaimRequest, OfferingKey, Time};
use aws_sdk_ec2::types::{
    Filter, InstanceLifecycleType, InstanceStateName, ResourceType, Tag, TagSpecification,
};
use fleet::{Choice, Subnet};
pub use settings::{ImageArch, ImageDriver, ImageVariant, NodeClass, Settings};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use template::{LaunchTemplate, TAG_LAUNCH_TEMPLATE};

/// Zone IDs of the region by zone name (zone IDs are the catalog's;
/// instances report names, which differ per account).
#[derive(Debug, Default)]
struct Zones {
    id_of: HashMap<String, String>,
}

/// The resolved node class of each NodePool, shared between the provider
/// (which launches with them) and the reconciler that resolves them, with
/// why the other pools have none.
#[derive(Debug, Clone, Default)]
pub struct NodeClasses(Arc<RwLock<PoolClassState>>, ReservationFindings);

#[derive(Debug, Default)]
struct PoolClassState {
    classes: HashMap<String, Arc<NodeClass>>,
    not_ready: BTreeMap<String, String>,
}

/// What the last reservation discovery found wrong with each class's
/// `capacityReservationSelectorTerms` (kept apart from the pools' classes,
/// which the reconciler replaces every round).
type ReservationFindings = Arc<RwLock<BTreeMap<String, Vec<String>>>>;

impl NodeClasses {
    /// Replaces every pool's class (and forgets why others had none).
    pub fn set(&self, classes: HashMap<String, Arc<NodeClass>>) {
        self.set_with_problems(classes, BTreeMap::new());
    }

    /// Replaces every pool's class, and why each pool in `not_ready` has
    /// none (the NodePool's status shows it).
    pub fn set_with_problems(
        &self,
        classes: HashMap<String, Arc<NodeClass>>,
        not_ready: BTreeMap<String, String>,
    ) {
        if let Ok(mut c) = self.0.write() {
            *c = PoolClassState { classes, not_ready };
        }
    }

    /// The class of `nodepool`, if it has a ready one.
    pub fn get(&self, nodepool: &str) -> Option<Arc<NodeClass>> {
        self.0.read().ok()?.classes.get(nodepool).cloned()
    }

    /// Why `nodepool` has no ready class, if the last resolution said so.
    pub fn problem(&self, nodepool: &str) -> Option<String> {
        self.0.read().ok()?.not_ready.get(nodepool).cloned()
    }

    /// Records what reservation discovery found: each class asked about,
    /// with the problems of its terms (none: every term found something
    /// usable). Classes not in `findings` were not asked.
    pub fn set_reservation_findings(&self, findings: BTreeMap<String, Vec<String>>) {
        if let Ok(mut f) = self.1.write() {
            *f = findings;
        }
    }

    /// The problems of `class`'s reservation selector terms at the last
    /// discovery (empty: none), or `None` when it was not asked about (no
    /// terms, not Ready, or no discovery yet).
    pub fn reservation_findings(&self, class: &str) -> Option<Vec<String>> {
        self.1.read().ok()?.get(class).cloned()
    }

    /// Every ready class once (pools may share one), by name.
    pub fn distinct(&self) -> Vec<Arc<NodeClass>> {
        let Ok(state) = self.0.read() else {
            return Vec::new();
        };
        let mut by_name: BTreeMap<&str, &Arc<NodeClass>> = BTreeMap::new();
        for class in state.classes.values() {
            by_name.entry(class.name.as_str()).or_insert(class);
        }
        by_name.into_values().cloned().collect()
    }
}

/// How long what launches look up in EC2 is reused ([`Described`]): about
/// one round of the loop.
pub const DESCRIBE_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// What launches look up in EC2, shared by the launches under way at once
/// and reused for [`DESCRIBE_TTL`]: the subnets and the security groups of
/// each node class's selector terms, and every instance of the cluster (a
/// launch first checks that its claim has none). One call fills each
/// entry; concurrent launches wait for it instead of making their own, so
/// a burst of 300 launches costs a few describes, not 900.
#[derive(Debug, Default)]
struct Described {
    subnets: Reused<HashMap<String, Subnet>>,
    security_groups: Reused<Vec<String>>,
    instances: tokio::sync::Mutex<Option<(std::time::Instant, Vec<Instance>)>>,
}

/// Lookups by selector terms, with when each was made.
type Reused<T> = tokio::sync::Mutex<HashMap<String, (std::time::Instant, T)>>;

/// What `fetch` finds for `terms`, from `cache` while younger than `ttl`;
/// one fetch at a time (the others wait for it and reuse what it found).
async fn reused<T: Clone, F: std::future::Future<Output = Result<T>>>(
    cache: &Reused<T>,
    ttl: std::time::Duration,
    terms: &[SelectorTerm],
    fetch: impl FnOnce() -> F,
) -> Result<T> {
    let key = format!("{terms:?}");
    let mut cache = cache.lock().await;
    if let Some((at, found)) = cache.get(&key) {
        if at.elapsed() < ttl {
            return Ok(found.clone());
        }
    }
    let found = fetch().await?;
    cache.insert(key, (std::time::Instant::now(), found.clone()));
    Ok(found)
}

/// The EC2 [`CloudProvider`]: one per cluster and region. Cheap to share
/// behind an `Arc`; every method takes `&self`.
#[derive(Debug)]
pub struct AwsCloud {
    ec2: aws_sdk_ec2::Client,
    settings: Settings,
    /// The resolved node class of each NodePool ([`AwsCloud::set_node_classes`]).
    node_classes: NodeClasses,
    zones: tokio::sync::OnceCell<Zones>,
    /// Launch templates known to exist (created or found by this process),
    /// with when a launch last used them ([`gc`] spares those in use).
    templates: Mutex<HashMap<String, Time>>,
    /// Placement groups known to exist, with when a launch last used them
    /// ([`placement`]).
    placement_groups: Mutex<HashMap<String, Time>>,
    /// Describes reused by launches ([`Described`]).
    described: Described,
    /// How long they are reused ([`DESCRIBE_TTL`]).
    describe_ttl: std::time::Duration,
}

impl AwsCloud {
    /// A provider over `ec2` (its retry configuration is the SDK config's:
    /// the standard mode retries throttling with backoff) with `settings`.
    ///
    /// # Errors
    /// `settings` are invalid ([`settings::Error::Invalid`]).
    pub fn new(ec2: aws_sdk_ec2::Client, settings: Settings) -> Result<AwsCloud, settings::Error> {
        settings.validate()?;
        Ok(AwsCloud {
            ec2,
            settings,
            node_classes: NodeClasses::default(),
            zones: tokio::sync::OnceCell::new(),
            templates: Mutex::new(HashMap::new()),
            placement_groups: Mutex::new(HashMap::new()),
            described: Described::default(),
            describe_ttl: DESCRIBE_TTL,
        })
    }

    /// A provider with an EC2 client built from `sdk` (as
    /// [`super::load_sdk_config`] loads it: standard credentials, region and
    /// retry configuration).
    ///
    /// # Errors
    /// As [`AwsCloud::new`].
    pub fn from_sdk_config(
        sdk: &aws_config::SdkConfig,
        settings: Settings,
    ) -> Result<AwsCloud, settings::Error> {
        AwsCloud::new(aws_sdk_ec2::Client::new(sdk), settings)
    }

    /// This provider reusing what launches describe for `ttl` instead of
    /// [`DESCRIBE_TTL`] (zero: never).
    #[must_use]
    pub fn with_describe_ttl(mut self, ttl: std::time::Duration) -> AwsCloud {
        self.describe_ttl = ttl;
        self
    }

    /// The settings in use.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Replaces the node classes launches use: NodePool name to its
    /// resolved (and `Ready`) EC2NodeClass. A pool missing here does not
    /// launch ([`Error::NotReady`] naming the pool).
    pub fn set_node_classes(&self, classes: HashMap<String, Arc<NodeClass>>) {
        self.node_classes.set(classes);
    }

    /// The resolved node class of `nodepool`, if it is ready.
    pub fn node_class(&self, nodepool: &str) -> Option<Arc<NodeClass>> {
        self.node_classes.get(nodepool)
    }

    /// A handle on the node classes launches use, for the reconciler that
    /// resolves them (the provider itself is owned by the loop).
    pub fn node_classes(&self) -> NodeClasses {
        self.node_classes.clone()
    }

    /// This provider with `classes` as its node classes: a second provider
    /// (the reservation discovery task's) then sees every class the
    /// reconciler sets on the first ([`AwsCloud::node_classes`]).
    #[must_use]
    pub fn sharing_node_classes(mut self, classes: NodeClasses) -> AwsCloud {
        self.node_classes = classes;
        self
    }

    fn cluster_filter(&self) -> Filter {
        tag_filter(l::TAG_CLUSTER, &self.settings.cluster_name)
    }

    async fn zones(&self, claim: &str) -> Result<&Zones> {
        self.zones
            .get_or_try_init(|| async {
                let out = self
                    .ec2
                    .describe_availability_zones()
                    .send()
                    .await
                    .map_err(|e| step("DescribeAvailabilityZones", claim).sdk_error(&e))?;
                let mut zones = Zones::default();
                for z in out.availability_zones() {
                    if let (Some(name), Some(id)) = (z.zone_name(), z.zone_id()) {
                        zones.id_of.insert(name.to_string(), id.to_string());
                    }
                }
                Ok(zones)
            })
            .await
    }

    /// Every instance tagged with our cluster (and `filters`), in any state.
    async fn find(&self, claim: &str, filters: Vec<Filter>) -> Result<Vec<Instance>> {
        let pages: Vec<_> = self
            .ec2
            .describe_instances()
            .set_filters(Some(
                std::iter::once(self.cluster_filter())
                    .chain(filters)
                    .collect(),
            ))
            .into_paginator()
            .send()
            .collect()
            .await;
        let zones = self.zones(claim).await?;
        let mut found = Vec::new();
        for page in pages {
            let page = page.map_err(|e| step("DescribeInstances", claim).sdk_error(&e))?;
            for r in page.reservations() {
                for i in r.instances() {
                    match instance_of(i, zones) {
                        Some(instance) => found.push(instance),
                        None => tracing::warn!(
                            instance = i.instance_id(),
                            "instance has our cluster tag but no claim tag, type, zone or launch time; ignored"
                        ),
                    }
                }
            }
        }
        Ok(found)
    }

    /// The instances of `claim`, best first: alive before gone, newest first.
    async fn of_claim(&self, claim: &str) -> Result<Vec<Instance>> {
        let found = self
            .find(claim, vec![tag_filter(l::TAG_NODECLAIM, claim)])
            .await?;
        Ok(best_first(found))
    }

    /// The instances of `claim` as the cluster's instance listing has them
    /// ([`Described`]: listed at most [`DESCRIBE_TTL`] ago), best first.
    async fn of_claim_listed(&self, claim: &str) -> Result<Vec<Instance>> {
        let mut listed = self.described.instances.lock().await;
        if listed
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= self.describe_ttl)
        {
            let all = self.find(claim, Vec::new()).await?;
            *listed = Some((std::time::Instant::now(), all));
        }
        let mine = listed
            .as_ref()
            .map(|(_, all)| all.iter().filter(|i| i.claim == claim).cloned().collect())
            .unwrap_or_default();
        Ok(best_first(mine))
    }

    /// Adds a launched instance to the cached listing, or (`None`) drops the
    /// listing after instances changed state.
    async fn relist(&self, launched: Option<&Instance>) {
        let mut listed = self.described.instances.lock().await;
        match (launched, listed.as_mut()) {
            (Some(i), Some((_, all))) => all.push(i.clone()),
            _ => *listed = None,
        }
    }

    /// Subnets matching any of `terms`, best per zone ID (most free
    /// addresses), looked up at most once per [`DESCRIBE_TTL`].
    async fn subnets(
        &self,
        claim: &str,
        terms: &[SelectorTerm],
    ) -> Result<HashMap<String, Subnet>> {
        reused(&self.described.subnets, self.describe_ttl, terms, || {
            self.describe_subnets(claim, terms)
        })
        .await
    }

    async fn describe_subnets(
        &self,
        claim: &str,
        terms: &[SelectorTerm],
    ) -> Result<HashMap<String, Subnet>> {
        let zones = self.zones(claim).await?;
        let found = find_subnets(&self.ec2, terms)
            .await
            .map_err(|e| step("DescribeSubnets", claim).sdk_error(&e))?;
        let mut best: HashMap<String, Subnet> = HashMap::new();
        for mut subnet in found {
            if subnet.zone_id.is_empty() {
                match zones.id_of.get(&subnet.zone_name) {
                    Some(id) => subnet.zone_id = id.clone(),
                    None => continue,
                }
            }
            let better = best.get(&subnet.zone_id).is_none_or(|b| {
                (subnet.free_addresses, std::cmp::Reverse(&subnet.id))
                    > (b.free_addresses, std::cmp::Reverse(&b.id))
            });
            if better {
                best.insert(subnet.zone_id.clone(), subnet);
            }
        }
        Ok(best)
    }

    /// Security group IDs matching any of `terms`, looked up at most once
    /// per [`DESCRIBE_TTL`].
    async fn security_groups(&self, claim: &str, terms: &[SelectorTerm]) -> Result<Vec<String>> {
        reused(
            &self.described.security_groups,
            self.describe_ttl,
            terms,
            || self.describe_security_groups(claim, terms),
        )
        .await
    }

    async fn describe_security_groups(
        &self,
        claim: &str,
        terms: &[SelectorTerm],
    ) -> Result<Vec<String>> {
        let ids: Vec<String> = find_security_groups(&self.ec2, terms)
            .await
            .map_err(|e| step("DescribeSecurityGroups", claim).sdk_error(&e))?
            .into_iter()
            .filter_map(|g| g.group_id)
            .collect();
        if ids.is_empty() {
            return Err(Error::Other(format!(
                "cannot launch {claim}: no security group matches {}",
                describe_terms(terms)
            )));
        }
        Ok(ids)
    }

    /// Creates `lt` under `name` unless this process already knows it
    /// exists; a template created meanwhile by another replica is fine.
    /// Records the use at `now`.
    async fn ensure_template(
        &self,
        claim: &ClaimRequest,
        name: &str,
        lt: &LaunchTemplate,
        now: Time,
    ) -> Result<()> {
        if let Some(used) = self.templates.lock().map_err(|_| poisoned())?.get_mut(name) {
            *used = now;
            return Ok(());
        }
        let tags: Vec<Tag> = lt
            .tags
            .iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect();
        let created = self
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(lt.data())
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .set_tags(Some(tags))
                    .build(),
            )
            .send()
            .await;
        match created {
            Ok(_) => tracing::info!(
                claim = claim.claim,
                template = name,
                "created launch template"
            ),
            Err(e)
                if aws_sdk_ec2::error::ProvideErrorMetadata::code(&e)
                    == Some("InvalidLaunchTemplateName.AlreadyExistsException") => {}
            Err(e) => return Err(step("CreateLaunchTemplate", &claim.claim).sdk_error(&e)),
        }
        self.templates
            .lock()
            .map_err(|_| poisoned())?
            .insert(name.to_string(), now);
        Ok(())
    }

    /// The tags of everything a launch creates: ownership (cluster,
    /// NodePool, NodeClaim), the EKS cluster tag, the name, the expected
    /// price, the launch template (which [`gc`] keeps while the instance
    /// lives) and the node class's extras.
    fn launch_tags(
        &self,
        claim: &ClaimRequest,
        class: &NodeClass,
        template_name: &str,
    ) -> Vec<(String, String)> {
        let cluster = &self.settings.cluster_name;
        let mut tags: Vec<(String, String)> = vec![
            (l::TAG_CLUSTER.into(), cluster.clone()),
            (format!("kubernetes.io/cluster/{cluster}"), "owned".into()),
            (l::NODEPOOL.into(), claim.nodepool.clone()),
            (l::TAG_NODECLAIM.into(), claim.claim.clone()),
            ("Name".into(), claim.claim.clone()),
            (l::TAG_PRICE.into(), format!("{:.6}", claim.price_per_hour)),
            (TAG_LAUNCH_TEMPLATE.into(), template_name.into()),
        ];
        tags.push((TAG_NODE_CLASS.into(), class.name.clone()));
        tags.extend(class.tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        tags
    }

    /// The launch template for `claim` in its node class.
    async fn launch_template(
        &self,
        claim: &ClaimRequest,
        template: &NodeTemplate,
        class: &NodeClass,
    ) -> Result<LaunchTemplate> {
        let variant = ImageVariant::of(&claim.offering.instance_type, &template.labels);
        let image_id = class.image_for(variant).ok_or_else(|| {
            Error::Other(format!(
                "cannot launch {} as {}: EC2NodeClass {} has no {variant} image",
                claim.claim, claim.offering.instance_type, class.name
            ))
        })?;
        let user_data = template::user_data(&self.settings, class, template)
            .map_err(|why| Error::Other(format!("cannot launch {}: {why}", claim.claim)))?;
        let mut tags = class.tags.clone();
        tags.insert(l::TAG_CLUSTER.into(), self.settings.cluster_name.clone());
        tags.insert(l::NODEPOOL.into(), claim.nodepool.clone());
        Ok(LaunchTemplate {
            image_id: image_id.to_string(),
            instance_profile: class.instance_profile.clone(),
            security_group_ids: self
                .security_groups(&claim.claim, &class.security_group_selector_terms)
                .await?,
            block_devices: class.block_devices_for(&claim.offering.instance_type),
            metadata: class.metadata_options.clone(),
            user_data,
            tags,
            capacity_reservation: template::ReservationTarget::of(claim, template),
            efa_interfaces: template
                .labels
                .get(l::EFA_INTERFACES)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            placement_group: None,
        })
    }
}

/// What the node classes' `capacityReservationSelectorTerms` found: the
/// reservations to offer (each once), and every term or reservation that
/// gives nothing usable, named (for logs and NodePool status).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiscoveredReservations {
    /// Active and scheduled reservations and Capacity Blocks.
    pub reservations: Vec<crate::catalog::Reservation>,
    /// `EC2NodeClass/<name>.capacityReservationSelectorTerms[<i>]: <problem>`.
    pub problems: Vec<String>,
    /// Each class asked about, with its problems as
    /// `capacityReservationSelectorTerms[<i>]: <problem>` (for its status).
    pub by_class: BTreeMap<String, Vec<String>>,
}

impl AwsCloud {
    /// Asks EC2 for the reservations every resolved node class selects
    /// (`DescribeCapacityReservations` per term; no call when no class has
    /// terms). A term that matches
    /// nothing, an ID that does not exist and a reservation that has ended
    /// are problems, not errors: the other terms still count.
    ///
    /// # Errors
    /// EC2 could not be asked (throttled past retries, unreachable, denied).
    pub async fn capacity_reservations(&self) -> Result<DiscoveredReservations> {
        const WHAT: &str = "capacity reservations";
        let region = self
            .ec2
            .config()
            .region()
            .map(|r| r.to_string())
            .unwrap_or_default();
        let classes = self.node_classes.distinct();
        let mut found = DiscoveredReservations::default();
        let mut problems: Vec<(String, String)> = Vec::new();
        for class in &classes {
            if class.capacity_reservation_selector_terms.is_empty() {
                continue;
            }
            found.by_class.entry(class.name.clone()).or_default();
            for (i, term) in class.capacity_reservation_selector_terms.iter().enumerate() {
                let field = format!("capacityReservationSelectorTerms[{i}]");
                let mut problem = |message: String| problems.push((class.name.clone(), message));
                let pages: Vec<_> = self
                    .ec2
                    .describe_capacity_reservations()
                    .set_capacity_reservation_ids(
                        Some(reservations::ids(term)).filter(|v| !v.is_empty()),
                    )
                    .set_filters(Some(reservations::filters(term)).filter(|v| !v.is_empty()))
                    .into_paginator()
                    .send()
                    .collect()
                    .await;
                let zones = self.zones(WHAT).await?;
                let mut matched = 0;
                for page in pages {
                    let page = match page {
                        Ok(page) => page,
                        Err(e)
                            if aws_sdk_ec2::error::ProvideErrorMetadata::code(&e)
                                .is_some_and(|c| c.starts_with("InvalidCapacityReservationId")) =>
                        {
                            problem(format!(
                                "{field}: {} does not exist",
                                term.id.as_deref().unwrap_or("the reservation")
                            ));
                            matched = usize::MAX;
                            break;
                        }
                        Err(e) => {
                            return Err(step("DescribeCapacityReservations", WHAT).sdk_error(&e))
                        }
                    };
                    for cr in page.capacity_reservations() {
                        matched += 1;
                        match reservations::reservation_of(
                            cr,
                            &region,
                            &zones.id_of,
                            term.price_per_hour.unwrap_or(0.0),
                        ) {
                            Ok(r) if !found.reservations.iter().any(|o| o.id == r.id) => {
                                found.reservations.push(r)
                            }
                            Ok(_) => {}
                            Err(why) => problem(format!("{field}: {why}")),
                        }
                    }
                }
                if matched == 0 {
                    problem(format!(
                        "{field}: matches no active or scheduled capacity reservation"
                    ));
                }
            }
        }
        for (class, message) in problems {
            found
                .problems
                .push(format!("EC2NodeClass/{class}.{message}"));
            found.by_class.entry(class).or_default().push(message);
        }
        Ok(found)
    }
}

/// Instances best first: alive before gone, newest first.
fn best_first(mut found: Vec<Instance>) -> Vec<Instance> {
    found.sort_by(|a, b| {
        b.state
            .is_alive()
            .cmp(&a.state.is_alive())
            .then(b.launched_at.cmp(&a.launched_at))
    });
    found
}

/// A [`Step`] without an offering.
fn step<'a>(action: &'static str, claim: &'a str) -> Step<'a> {
    Step {
        action,
        claim,
        offering: None,
    }
}

fn poisoned() -> Error {
    Error::Other("EC2 provider state lock poisoned".into())
}

/// Instance tag: the EC2NodeClass the instance was launched with.
pub const TAG_NODE_CLASS: &str = "quartermaster.dev/ec2nodeclass";

/// Subnets of any of `terms` (one `DescribeSubnets` per term; IDs
/// deduplicated), with their zone name, zone ID (empty when EC2 does not
/// report it) and free addresses.
///
/// # Errors
/// The SDK error of the first failed call.
pub(crate) async fn find_subnets(
    ec2: &aws_sdk_ec2::Client,
    terms: &[SelectorTerm],
) -> Result<
    Vec<Subnet>,
    aws_sdk_ec2::error::SdkError<aws_sdk_ec2::operation::describe_subnets::DescribeSubnetsError>,
> {
    let mut out: Vec<Subnet> = Vec::new();
    for term in terms {
        let pages: Vec<_> = ec2
            .describe_subnets()
            .set_filters(Some(term_filters(term, "subnet-id")))
            .into_paginator()
            .send()
            .collect()
            .await;
        for page in pages {
            for s in page?.subnets() {
                let (Some(id), Some(zone_name)) = (s.subnet_id(), s.availability_zone()) else {
                    continue;
                };
                if out.iter().any(|o| o.id == id) {
                    continue;
                }
                out.push(Subnet {
                    id: id.to_string(),
                    zone_id: s.availability_zone_id().unwrap_or_default().to_string(),
                    zone_name: zone_name.to_string(),
                    free_addresses: s.available_ip_address_count().unwrap_or(0),
                });
            }
        }
    }
    Ok(out)
}

/// Security groups (ID, name) of any of `terms`, sorted by ID, deduplicated.
///
/// # Errors
/// The SDK error of the first failed call.
pub(crate) async fn find_security_groups(
    ec2: &aws_sdk_ec2::Client,
    terms: &[SelectorTerm],
) -> Result<
    Vec<aws_sdk_ec2::types::SecurityGroup>,
    aws_sdk_ec2::error::SdkError<
        aws_sdk_ec2::operation::describe_security_groups::DescribeSecurityGroupsError,
    >,
> {
    let mut out = Vec::new();
    for term in terms {
        let pages: Vec<_> = ec2
            .describe_security_groups()
            .set_filters(Some(term_filters(term, "group-id")))
            .into_paginator()
            .send()
            .collect()
            .await;
        for page in pages {
            out.extend(
                page?
                    .security_groups()
                    .iter()
                    .filter(|g| g.group_id().is_some())
                    .cloned(),
            );
        }
    }
    out.sort_by(|a, b| a.group_id().cmp(&b.group_id()));
    out.dedup_by(|a, b| a.group_id() == b.group_id());
    Ok(out)
}

/// A short text of selector terms for messages: `id subnet-1 | tags {a: b}`.
pub(crate) fn describe_terms(terms: &[SelectorTerm]) -> String {
    terms
        .iter()
        .map(|t| match &t.id {
            Some(id) => format!("id {id}"),
            None => format!("tags {:?}", t.tags),
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Filters of one selector term: its ID (as `id_filter`), or every tag
/// (`*` matches any value).
fn term_filters(term: &SelectorTerm, id_filter: &str) -> Vec<Filter> {
    match &term.id {
        Some(id) => vec![Filter::builder().name(id_filter).values(id).build()],
        None => selector_filters(&term.tags),
    }
}

fn tag_filter(key: &str, value: &str) -> Filter {
    Filter::builder()
        .name(format!("tag:{key}"))
        .values(value)
        .build()
}

/// `DescribeSubnets`/`DescribeSecurityGroups`/`DescribeImages` filters for
/// a tag selector: every tag must match; `*` matches any value.
pub(crate) fn selector_filters(selector: &BTreeMap<String, String>) -> Vec<Filter> {
    selector
        .iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                tag_filter(k, v)
            }
        })
        .collect()
}

fn tag<'a>(i: &'a aws_sdk_ec2::types::Instance, key: &str) -> Option<&'a str> {
    i.tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
}

/// Our [`Instance`] for an EC2 instance carrying our claim tag; `None` for
/// one without it or without type, zone or ID.
fn instance_of(i: &aws_sdk_ec2::types::Instance, zones: &Zones) -> Option<Instance> {
    let claim = tag(i, l::TAG_NODECLAIM)?;
    let id = i.instance_id()?;
    let placement = i.placement()?;
    let zone_name = placement.availability_zone()?;
    let zone_id = placement
        .availability_zone_id()
        .or_else(|| zones.id_of.get(zone_name).map(String::as_str))?;
    let state = match i.state().and_then(|s| s.name()) {
        Some(InstanceStateName::Pending) => InstanceState::Pending,
        Some(InstanceStateName::Running) => InstanceState::Running,
        Some(InstanceStateName::Terminated) => InstanceState::Terminated,
        // Not usable, but not on their way out either: we never stop an
        // instance, so someone else did (garbage collection terminates one
        // no claim has).
        Some(InstanceStateName::Stopping | InstanceStateName::Stopped) => InstanceState::Stopped,
        _ => InstanceState::ShuttingDown,
    };
    let launched_at = i
        .launch_time()
        .and_then(|t| chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos()))?;
    Some(Instance {
        claim: claim.to_string(),
        provider_id: format!("aws:///{zone_name}/{id}"),
        offering: OfferingKey {
            instance_type: i.instance_type()?.as_str().to_string(),
            zone: zone_id.to_string(),
            capacity_type: match i.instance_lifecycle() {
                Some(InstanceLifecycleType::Spot) => CapacityType::Spot,
                Some(InstanceLifecycleType::CapacityBlock) => CapacityType::Reserved,
                _ if i.capacity_reservation_id().is_some() => CapacityType::Reserved,
                _ => CapacityType::OnDemand,
            },
        },
        price_per_hour: tag(i, l::TAG_PRICE)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0.0),
        launched_at,
        state,
    })
}

impl CloudProvider for AwsCloud {
    /// Returns the claim's instance if one exists (a launch retried after a
    /// crash); otherwise resolves subnets and security groups, ensures the
    /// launch template, and launches through `CreateFleet` over the claim's
    /// offering and the template's fallbacks of the same capacity type that
    /// have a subnet.
    async fn launch(
        &self,
        claim: &ClaimRequest,
        template: &NodeTemplate,
        now: Time,
    ) -> Result<Instance> {
        // An EFA node, and a node of a gang that must share one network
        // block, goes into its pool's placement group of its zone: no
        // fallbacks in other zones.
        let efa = crate::cloud::in_placement_group(&template.labels);
        let offerings: Vec<&OfferingKey> = std::iter::once(&claim.offering)
            .chain(template.fallbacks.iter().filter(|f| {
                !efa && f.capacity_type == claim.offering.capacity_type && **f != claim.offering
            }))
            .collect();
        if let Some(existing) = self.of_claim_listed(&claim.claim).await?.into_iter().next() {
            if !offerings.contains(&&existing.offering) {
                return Err(Error::Other(format!(
                    "cannot launch {} as {}: already launched as {}",
                    claim.claim, claim.offering, existing.offering
                )));
            }
            return Ok(existing);
        }
        let class = self
            .node_class(&claim.nodepool)
            .ok_or_else(|| Error::NotReady {
                claim: claim.claim.clone(),
                reason: format!(
                    "the EC2NodeClass of NodePool {} is not resolved and Ready (see its status)",
                    claim.nodepool
                ),
            })?;
        let class = class.as_ref();
        let subnets = self
            .subnets(&claim.claim, &class.subnet_selector_terms)
            .await?;
        let choices: Vec<Choice> = offerings
            .iter()
            .filter_map(|o| {
                subnets.get(&o.zone).map(|s| Choice {
                    offering: (*o).clone(),
                    subnet: s.clone(),
                })
            })
            .collect();
        if choices.is_empty() {
            let zones: Vec<&str> = offerings.iter().map(|o| o.zone.as_str()).collect();
            return Err(Error::Other(format!(
                "cannot launch {} as {}: no subnet matching {} in zone(s) {}",
                claim.claim,
                claim.offering,
                describe_terms(&class.subnet_selector_terms),
                zones.join(", ")
            )));
        }
        let mut lt = self.launch_template(claim, template, class).await?;
        if efa {
            let group = placement::group_name(
                &self.settings.cluster_name,
                &claim.nodepool,
                &claim.offering.zone,
            );
            self.ensure_placement_group(&claim.claim, &group, &claim.nodepool, now)
                .await?;
            lt.placement_group = Some(group);
        }
        let name = lt.name(&self.settings.cluster_name);
        self.ensure_template(claim, &name, &lt, now).await?;
        let mut tags = self.launch_tags(claim, class, &name);
        if let Some(group) = &lt.placement_group {
            tags.push((placement::TAG_PLACEMENT_GROUP.into(), group.clone()));
        }
        let token = fleet::client_token(
            &self.settings.cluster_name,
            &claim.claim,
            &name,
            &choices,
            &tags,
        );
        let capacity_block = lt
            .capacity_reservation
            .as_ref()
            .is_some_and(|r| r.capacity_block);
        let launched = match fleet::request(
            self.ec2.create_fleet(),
            &name,
            &choices,
            &tags,
            token,
            capacity_block,
        )
        .send()
        .await
        {
            Ok(out) => fleet::outcome(&out, &claim.claim, &choices),
            Err(e) => Err(Step {
                action: "CreateFleet",
                claim: &claim.claim,
                offering: Some(&claim.offering),
            }
            .sdk_error(&e)),
        };
        if launched.is_err() {
            // The template may have been deleted behind our back: make the
            // next launch ensure it again (one more CreateLaunchTemplate).
            self.templates.lock().map_err(|_| poisoned())?.remove(&name);
        }
        let (id, rank) = launched?;
        let choice = &choices[rank];
        tracing::info!(claim = claim.claim, instance = id, offering = %choice.offering, "launched");
        let instance = Instance {
            claim: claim.claim.clone(),
            provider_id: format!("aws:///{}/{id}", choice.subnet.zone_name),
            offering: choice.offering.clone(),
            price_per_hour: claim.price_per_hour,
            launched_at: now,
            state: InstanceState::Pending,
        };
        self.relist(Some(&instance)).await;
        Ok(instance)
    }

    /// Terminates every live instance tagged with the claim (normally one)
    /// and returns the best of them, now shutting down.
    async fn terminate(&self, claim: &str, _now: Time) -> Result<Instance> {
        let found = self.of_claim(claim).await?;
        let Some(first) = found.first() else {
            return Err(Error::NotFound {
                claim: claim.to_string(),
            });
        };
        let live: Vec<String> = found
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .map(|i| crate::cloud::instance_id_of(&i.provider_id).to_string())
            .collect();
        if live.is_empty() {
            return Ok(first.clone());
        }
        let out = self
            .ec2
            .terminate_instances()
            .set_instance_ids(Some(live))
            .send()
            .await
            .map_err(|e| step("TerminateInstances", claim).sdk_error(&e))?;
        let mut instance = first.clone();
        let id = crate::cloud::instance_id_of(&instance.provider_id).to_string();
        let now_state = out
            .terminating_instances()
            .iter()
            .find(|c| c.instance_id() == Some(id.as_str()))
            .and_then(|c| c.current_state())
            .and_then(|s| s.name());
        instance.state = match now_state {
            Some(InstanceStateName::Terminated) => InstanceState::Terminated,
            _ => InstanceState::ShuttingDown,
        };
        tracing::info!(claim, instance = id, "terminating");
        self.relist(None).await;
        Ok(instance)
    }

    /// `RebootInstances` on the claim's running instance (the policy
    /// allows it on our cluster's instances only).
    async fn reboot(&self, claim: &str, _now: Time) -> Result<Instance> {
        let running = self
            .of_claim(claim)
            .await?
            .into_iter()
            .find(|i| i.state == InstanceState::Running)
            .ok_or_else(|| Error::NotFound {
                claim: claim.to_string(),
            })?;
        let id = crate::cloud::instance_id_of(&running.provider_id).to_string();
        self.ec2
            .reboot_instances()
            .instance_ids(&id)
            .send()
            .await
            .map_err(|e| step("RebootInstances", claim).sdk_error(&e))?;
        tracing::info!(claim, instance = id, "rebooting");
        Ok(running)
    }

    /// Terminates that instance alone (a double of its claim's).
    async fn terminate_instance(&self, instance: &Instance, _now: Time) -> Result<()> {
        let id = crate::cloud::instance_id_of(&instance.provider_id).to_string();
        self.ec2
            .terminate_instances()
            .instance_ids(&id)
            .send()
            .await
            .map_err(|e| step("TerminateInstances", &instance.claim).sdk_error(&e))?;
        tracing::info!(
            claim = instance.claim,
            instance = id,
            "terminating a double"
        );
        self.relist(None).await;
        Ok(())
    }

    /// The claim's instance as the cluster's listing of the last
    /// [`DESCRIBE_TTL`] has it, or from its own `DescribeInstances` when
    /// the listing has none (a launch this listing predates is never
    /// missed).
    async fn describe(&self, claim: &str) -> Result<Option<Instance>> {
        if let Some(i) = self.of_claim_listed(claim).await?.into_iter().next() {
            return Ok(Some(i));
        }
        Ok(self.of_claim(claim).await?.into_iter().next())
    }

    /// Why the pool's node class is missing or not Ready (the reconciler's
    /// last word), so that its status says why it launches nothing.
    fn pool_problem(&self, nodepool: &str) -> Option<String> {
        self.node_classes.problem(nodepool)
    }

    /// The pool's class's [`NodeClass::drift_hash`] and the image the
    /// claim's variant gets from it; `None` without a ready class.
    fn launch_stamp(
        &self,
        claim: &crate::api::NodeClaimSpec,
    ) -> Option<crate::core::drift::ClassStamp> {
        let class = self.node_class(&claim.node_pool)?;
        let variant = ImageVariant::of(&claim.instance_type, &claim.labels);
        Some(crate::core::drift::ClassStamp {
            hash: class.drift_hash(),
            image: class.image_for(variant)?.to_string(),
        })
    }

    /// The pool's node class's [`NodeClass::image_requirements`]; none for a
    /// pool without a ready class (it does not launch at all).
    fn pool_requirements(&self, nodepool: &str) -> Vec<crate::api::Requirement> {
        self.node_class(nodepool)
            .map(|c| c.image_requirements())
            .unwrap_or_default()
    }

    /// Deletes launch templates ([`gc`]) and, once this process has made
    /// an EFA launch, placement groups ([`placement`]) no instance or recent
    /// launch uses.
    async fn collect_unused_resources(
        &self,
        now: Time,
        grace: chrono::TimeDelta,
    ) -> Result<(Vec<String>, Vec<Error>)> {
        let (mut deleted, mut failed) = self.collect_launch_templates(now, grace).await?;
        // Only a process that made EFA launches looks for placement groups
        // (a cluster without EFA nodes never pays the call).
        let placing = !self
            .placement_groups
            .lock()
            .map_err(|_| poisoned())?
            .is_empty();
        if placing {
            match self.collect_placement_groups(now, grace).await {
                Ok((groups, errors)) => {
                    deleted.extend(groups);
                    failed.extend(errors);
                }
                Err(e) => failed.push(e),
            }
        }
        Ok((deleted, failed))
    }

    /// Every instance with our cluster tag that is not terminated.
    async fn instances(&self) -> Result<Vec<Instance>> {
        let states = Filter::builder()
            .name("instance-state-name")
            .set_values(Some(
                ["pending", "running", "shutting-down", "stopping", "stopped"]
                    .map(String::from)
                    .to_vec(),
            ))
            .build();
        self.find("garbage collection", vec![states]).await
    }

    /// `DescribeInstanceTopology` of the instance, for types EC2 reports a
    /// topology for ([`crate::catalog::topology`]); no call for the others.
    async fn network_nodes(&self, claim: &str, instance: &Instance) -> Result<Vec<String>> {
        if crate::catalog::topology::network_layers(&instance.offering.instance_type).is_none() {
            return Ok(Vec::new());
        }
        let id = crate::cloud::instance_id_of(&instance.provider_id);
        let out = self
            .ec2
            .describe_instance_topology()
            .instance_ids(id)
            .send()
            .await
            .map_err(|e| step("DescribeInstanceTopology", claim).sdk_error(&e))?;
        Ok(out
            .instances()
            .iter()
            .find(|t| t.instance_id() == Some(id))
            .map(|t| t.network_nodes().to_vec())
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str) -> Arc<NodeClass> {
        Arc::new(NodeClass {
            name: name.into(),
            ..settings::tests::class(Vec::new())
        })
    }

    #[test]
    fn a_class_shared_by_pools_is_distinct_once_and_every_handle_sees_updates() {
        let classes = NodeClasses::default();
        let other = classes.clone();
        assert!(other.distinct().is_empty());
        let gpu = class("gpu");
        classes.set(HashMap::from([
            ("train".to_string(), gpu.clone()),
            ("infer".to_string(), gpu),
            ("cpu".to_string(), class("general")),
        ]));
        let names: Vec<String> = other.distinct().iter().map(|c| c.name.clone()).collect();
        assert_eq!(names, ["general", "gpu"]);
    }
}
