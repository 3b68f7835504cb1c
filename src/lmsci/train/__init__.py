"""lmsci.train"""
