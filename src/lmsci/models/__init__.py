"""lmsci.models"""
