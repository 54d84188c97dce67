//! EC2 launches: launch templates, CreateFleet, describe, terminate, garbage collection.
