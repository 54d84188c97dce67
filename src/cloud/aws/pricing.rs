//! Live prices: on-demand from the Pricing API, spot from DescribeSpotPriceHistory.
