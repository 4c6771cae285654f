"""prism.metrics"""
