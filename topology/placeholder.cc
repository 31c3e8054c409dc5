// replaced by the topology layer
