"""`ocihook device-plugin`: the kubelet's device plugin (API v1beta1) for a profile's devices."""
