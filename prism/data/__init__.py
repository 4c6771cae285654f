"""prism.data"""
