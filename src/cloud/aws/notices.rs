//! Interruption notices: an SQS consumer for the EventBridge events EC2 and AWS Health send.
